"""``sparsefs clean``: remove what SparseFS keeps of the documents it read (parsed text, episodes, frozen packs,
pack logs), all of it or what is older than N days.

It is safe while mounts run: a state directory in use (a live mount, or a read in progress) is kept and
named with the mount that holds it, and the command exits 1 so a script sees that something stayed; the
rest is removed under each directory's own lock (sparsefs.store.retention). Without ``--older-than`` the
whole cache root goes, derived files too (a model converted for dense retrieval is converted again when
next needed). ``--state-dir DIR`` cleans one state directory anywhere, and only one that holds SparseFS
state: it never removes a folder it did not write.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path
from typing import TextIO

from sparsefs.app.mountinfo import mount_holding
from sparsefs.store import retention
from sparsefs.store.state import StateDirBusy


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    clean = sub.add_parser("clean", help="remove the cache of parsed text, episodes and logs (all, or older ones)")
    clean.add_argument("--older-than", type=float, metavar="DAYS",
                       help="only state directories unused for more than DAYS days (default: everything; "
                            f"mounts remove those unused for ${retention.RETAIN_ENV} days, default "
                            f"{retention.DEFAULT_RETAIN_DAYS}, by themselves)")
    clean.add_argument("--state-dir", metavar="DIR", help="clean this one state directory (a --state-dir mount's)")
    clean.add_argument("-n", "--dry-run", action="store_true", help="say what would be removed, remove nothing")
    clean.set_defaults(handler=lambda args: run_clean(args, sys.stdout))


def run_clean(args: argparse.Namespace, out: TextIO) -> int:
    """The ``sparsefs clean`` command: 0 when everything asked for is gone, 1 when something in use stayed."""
    root = retention.cache_root()
    if args.state_dir is not None:
        targets = [Path(args.state_dir).resolve()]
        if not retention.is_state_dir(targets[0]):
            out.write(f"sparsefs: {targets[0]} holds no SparseFS state (no mount.lock, log.jsonl, state.sqlite "
                      "or index/); nothing removed\n")
            return 2
    else:
        targets = retention.state_dirs(root)
        if args.older_than is not None:
            cutoff = time.time() - args.older_than * retention.DAY_S
            targets = [t for t in targets if retention.last_used(t) < cutoff]
    outcome = _remove_all(targets, args.dry_run)
    if args.state_dir is None and args.older_than is None:
        _remove_rest(root, outcome, args.dry_run)
    return _say(outcome, args.dry_run, root, out)


def _remove_all(targets: list[Path], dry_run: bool) -> retention.Outcome:
    outcome = retention.Outcome([], [])
    for state_dir in targets:
        if dry_run and retention.in_use(state_dir):
            outcome.busy.append(state_dir)
        elif dry_run:
            outcome.removed.append((state_dir, retention.tree_bytes(state_dir)))
        else:
            _remove_one(state_dir, outcome)
    return outcome


def _remove_one(state_dir: Path, outcome: retention.Outcome) -> None:
    try:
        outcome.removed.append((state_dir, retention.remove_state_dir(state_dir)))
    except StateDirBusy:
        outcome.busy.append(state_dir)


def _remove_rest(root: Path, outcome: retention.Outcome, dry_run: bool) -> None:
    """Everything else under the cache root (derived files); the root itself once empty."""
    seen = set(outcome.busy) | {path for path, _ in outcome.removed}
    for path in [p for p in (root.iterdir() if root.is_dir() else ()) if p not in seen]:
        folder = path.is_dir() and not path.is_symlink()
        outcome.removed.append((path, retention.tree_bytes(path) if folder else path.lstat().st_size))
        if dry_run:
            continue
        if folder:
            shutil.rmtree(path)
        else:
            path.unlink()
    if not dry_run and root.is_dir() and not any(root.iterdir()):
        root.rmdir()


def _say(outcome: retention.Outcome, dry_run: bool, root: Path, out: TextIO) -> int:
    verb = "would remove" if dry_run else "removed"
    for path, size in outcome.removed:
        out.write(f"{verb} {path} ({_mib(size)})\n")
    total = sum(size for _, size in outcome.removed)
    out.write(f"{verb} {len(outcome.removed)} item(s), {_mib(total)}" + ("" if outcome.removed else f" ({root})")
              + "\n")
    for path in outcome.busy:
        info = mount_holding(path)
        holder = f"the mount at {info.mountpoint} (pid {info.pid})" if info else "a read in progress"
        how = f"sparsefs umount {info.mountpoint}, then" if info else "wait for it, then"
        out.write(f"kept {path}: in use by {holder}; {how} run sparsefs clean again\n")
    return 1 if outcome.busy else 0


def _mib(size: int) -> str:
    return f"{size / (1 << 20):,.1f} MiB"
