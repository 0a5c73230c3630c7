"""``sparsefs doctor``: check what a mount needs, and say how to fix each problem.

Besides the machine (``/dev/fuse``, libfuse, permissions, inotify limits) it
looks at every SparseFS mounted now (fstype ``fuse.sparsefs`` in
``/proc/self/mountinfo``) and says, from its ``.sparsefs/stats.json``, whether
source changes are watched or only checked on access, why, and the fix, and how
its shared cache fares. The file is read by a child process with a deadline: a
hung daemon leaves its callers in uninterruptible sleep, and doctor must still
answer. ``--cache URL`` (or $SPARSEFS_CACHE) also checks a shared cache: the
engine is installed, the store answers, a probe is written, read back and
removed, and (Redis) whether it is bounded and evicts (``sparsefs.app.doctor_cache``).
"""

from __future__ import annotations

import ctypes.util
import json
import os
import pwd
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from sparsefs.fuse import features
from sparsefs.fuse.mounts import FSTYPE, mount_entries, mount_owner
from sparsefs.source.freshness import inotify_limit, suggested_watch_limit

STATS_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    required: bool = True


def check_dev_fuse() -> Check:
    path = "/dev/fuse"
    if not os.path.exists(path):
        return Check("/dev/fuse", False, "missing", "modprobe fuse (on a container: run with --device /dev/fuse)")
    if not stat.S_ISCHR(os.stat(path).st_mode):
        return Check("/dev/fuse", False, "not a character device", "recreate it: mknod /dev/fuse c 10 229")
    if not os.access(path, os.R_OK | os.W_OK):
        return Check("/dev/fuse", False, "not readable and writable by you", "chmod 666 /dev/fuse or run as root")
    return Check("/dev/fuse", True, "present, read-write")


def check_libfuse() -> Check:
    found = ctypes.util.find_library("fuse3")
    if not found:
        return Check("libfuse3", False, "not found", "apt-get install fuse3 libfuse3-3")
    return Check("libfuse3", True, found)


def check_fusermount() -> Check:
    tool = features.system_tool("fusermount3")
    if not tool:
        return Check("fusermount3", False, "not on PATH", "apt-get install fuse3")
    if os.geteuid() != 0 and not os.stat(tool).st_mode & stat.S_ISUID:
        return Check("fusermount3", False, f"{tool} is not setuid", f"chmod u+s {tool}")
    return Check("fusermount3", True, tool)


def check_permissions() -> Check:
    if os.geteuid() == 0:
        return Check("permissions", True, "running as root: mount(2) and unmount work directly")
    return Check("permissions", True, "unprivileged: mounts go through setuid fusermount3", required=False)


def check_allow_other() -> Check:
    conf = Path("/etc/fuse.conf")
    enabled = conf.exists() and any(line.strip() == "user_allow_other" for line in conf.read_text().splitlines())
    detail = "user_allow_other set" if enabled else "user_allow_other not set (needed for --allow-other as non-root)"
    return Check("/etc/fuse.conf", True, detail, "" if enabled else "echo user_allow_other >> /etc/fuse.conf",
                 required=False)


def check_binding() -> Check:
    try:
        import mfusepy
    except (ImportError, OSError, AttributeError) as err:
        return Check("mfusepy", False, f"cannot load: {err}", "pip install mfusepy (and apt-get install fuse3)")
    return Check("mfusepy", True, f"libfuse {mfusepy.fuse_version_major}.{mfusepy.fuse_version_minor}")


def check_backend() -> Check:
    from sparsefs.fuse.backends import choose

    backend, reason = choose("auto")
    detail = f"kernel {os.uname().release}; --backend auto uses {backend} ({reason})"
    fix = "" if backend == "kernel" else "the kernel backend needs /dev/fuse read-write and root or fusermount3"
    return Check("backend", True, detail, fix, required=False)


def check_kernel_features() -> Check:
    """What the kernel backend gets here, feature by feature, and what each needs (sparsefs.fuse.features)."""
    lines = features.feature_lines()
    missing = [line.split(":")[0] for line in lines if ": no " in line]
    blocker = features.passthrough_blocker()
    fix = "passthrough: " + blocker if blocker else ""
    detail = (f"lowest supported kernel {'.'.join(map(str, features.LOWEST_KERNEL))}; "
              + ("all features available" if not missing else f"not here: {', '.join(missing)}")
              + "\n       " + "\n       ".join(lines))
    return Check("kernel features", not missing, detail, fix, required=False)


def check_inotify() -> Check:
    watches = inotify_limit() or 0
    ok = watches >= 8192
    fix = f"sysctl fs.inotify.max_user_watches={suggested_watch_limit(0, watches)}" if not ok else ""
    detail = f"max_user_watches={watches} (one per watched directory), {watches_in_use()} in use by uid {os.getuid()}"
    return Check("inotify", ok, detail, fix, required=False)


def watches_in_use(uid: int | None = None) -> int:
    """inotify watches held by ``uid``'s processes now (the budget max_user_watches limits)."""
    uid = os.getuid() if uid is None else uid
    total = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.stat(f"/proc/{pid}").st_uid == uid:
                total += _process_watches(pid)
        except OSError:
            continue  # gone meanwhile, or not ours to read
    return total


def _process_watches(pid: str) -> int:
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:inotify":
                with open(f"/proc/{pid}/fdinfo/{fd}") as info:
                    count += sum(line.startswith("inotify wd:") for line in info)
        except OSError:
            continue
    return count


# ---- mounted SparseFS ------------------------------------------------------------------
def read_stats(mountpoint: str, timeout_s: float = STATS_TIMEOUT_S) -> dict[str, Any] | str:
    """The mount's stats.json, or why it could not be read (never blocks past ``timeout_s``)."""
    path = os.path.join(mountpoint, ".sparsefs", "stats.json")
    cat = features.system_tool("cat") or "/bin/cat"
    child = subprocess.Popen([cat, "--", path], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = child.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        child.kill()  # a FUSE wait is killable; if not, the child is left behind, doctor is not
        return f"no answer within {timeout_s:g} s: the daemon looks hung"
    if child.returncode != 0:
        return err.decode(errors="replace").strip() or f"cat exited with {child.returncode}"
    try:
        stats = json.loads(out)
    except ValueError:
        return "stats.json is not JSON"
    return stats if isinstance(stats, dict) else "stats.json is not an object"


def check_mounts(timeout_s: float = STATS_TIMEOUT_S) -> list[Check]:
    """One line per mounted SparseFS: how it learns of source changes, and the fix if it only checks; one more
    for a mount with a shared cache."""
    mounted = [entry.mountpoint for entry in mount_entries() if entry.fstype == FSTYPE]
    if not mounted:
        return [Check("mounts", True, "no SparseFS mounted", required=False)]
    checks = []
    for mnt in mounted:
        owner = mount_owner(mnt)
        if os.geteuid() != 0 and owner is not None and owner != os.getuid():
            checks.append(others_mount(mnt, owner))
            continue
        stats: dict[str, Any] = {}
        checks.append(check_mount(mnt, timeout_s, into=stats))
        if isinstance(stats.get("memory"), dict):
            checks.append(memory_check(f"mount {mnt}", stats["memory"]))
        if isinstance(stats.get("shared_cache"), dict):
            from sparsefs.app.doctor_cache import mount_cache_check  # it builds on Check, defined here

            checks.append(mount_cache_check(f"mount {mnt}", stats["shared_cache"]))
        if isinstance(stats.get("not_saved"), dict):
            checks.append(not_saved_check(f"mount {mnt}", stats["not_saved"]))
    return checks


def others_mount(mountpoint: str, owner: int) -> Check:
    """Another user's mount: named, never read or acted on (only its owner or root can unmount or remount it)."""
    try:
        name = pwd.getpwuid(owner).pw_name
    except KeyError:
        name = f"uid {owner}"
    return Check(f"mount {mountpoint}", True, f"mounted by {name} (uid {owner}), not you: not checked; its owner "
                 "or root can run sparsefs doctor for it", required=False)


def not_saved_check(name: str, missing: dict[str, Any]) -> Check:
    """A mount whose state directory refuses writes (a full disk) serves on from memory: say what waits."""
    waiting = "log lines wait in memory and are written once there is room; " if missing.get(
        "log_lines_waiting") else ""
    return Check(f"{name} state", False, str(missing.get("summary", "state not saved")),
                 f"free space on the state directory's filesystem ({waiting}episodes and packs are saved again "
                 "from the next read on)", required=False)


def memory_check(name: str, memory: dict[str, Any]) -> Check:
    """The daemon's resident memory against its cap (docs/SEMANTICS.md, "Memory")."""
    rss, cap = memory.get("rss_mib", 0), memory.get("cap_mib", 0)
    detail = (f"memory {rss} MiB resident of a {cap} MiB cap ({memory.get('set_by')}); parses held "
              f"{memory.get('parsed_mib')} of {memory.get('parsed_budget_mib')} MiB, {memory.get('evictions')} "
              "evicted to the parsed store")
    return Check(name, rss < cap, detail, "" if rss < cap else "raise it: sparsefs mount --memory-mb N (or "
                 "SPARSEFS_MEMORY_MB=N), then remount", required=False)


def check_mount(mountpoint: str, timeout_s: float = STATS_TIMEOUT_S, into: dict[str, Any] | None = None) -> Check:
    """How the mount learns of source changes; ``into`` receives the stats it read (one read per mount)."""
    name = f"mount {mountpoint}"
    stats = read_stats(mountpoint, timeout_s)
    if isinstance(stats, str):
        return Check(name, False, stats, f"sparsefs umount {mountpoint} (or: fusermount3 -u {mountpoint}), then "
                     "mount again", required=False)
    if into is not None:
        into.update(stats)
    watcher = stats.get("watcher")
    if not isinstance(watcher, dict):
        return Check(name, False, "its daemon does not report how it watches the source",
                     "remount it with this version of sparsefs", required=False)
    check = _watcher_check(name, watcher)
    granted = stats.get("kernel_features")
    if isinstance(granted, dict):  # the kernel backend: what this mount got from its kernel
        shown = ", ".join(f"{key} {'yes' if value is True else 'no' if value is False else value}"
                          for key, value in granted.items())
        check = Check(check.name, check.ok, f"{check.detail}; {shown}", check.fix, check.required)
    return check


def _watcher_check(name: str, watcher: dict[str, Any]) -> Check:
    mode, reason = watcher.get("mode"), str(watcher.get("reason") or "")
    limit = watcher.get("max_user_watches")
    if mode == "inotify":
        remote = "; " + reason if watcher.get("checked_on_access") else ""
        return Check(name, True, f"source changes watched by inotify ({watcher.get('watches')} directories, "
                     f"max_user_watches={limit}){remote}", required=False)
    if mode == "on-access" and reason.startswith("--no-watch"):
        return Check(name, True, "source changes checked on each open (--no-watch)", required=False)
    if mode == "on-access" and reason.startswith("the source is on"):
        return Check(name, True, f"source changes checked on each open: {reason}; a bare stat may lag up to 5 s "
                     "(docs/SEMANTICS.md, 'Sources inotify cannot see')", required=False)
    if mode == "on-access":
        return Check(name, False, f"source changes checked on each open, not watched: {reason}{_needs(watcher)}",
                     _fix_for(reason, watcher), required=False)
    return Check(name, False, f"source changes neither watched nor checked ({reason})",
                 "remount without --no-watch", required=False)


def _needs(watcher: dict[str, Any]) -> str:
    directories = watcher.get("directories")
    return f"; the tree needs {directories} watches" if isinstance(directories, int) else ""


def _fix_for(reason: str, watcher: dict[str, Any]) -> str:
    if "SPARSEFS_MAX_WATCHES=" in reason:
        return "raise SPARSEFS_MAX_WATCHES in the daemon's environment (or unset it), then remount"
    if "max_user_instances" in reason:
        setting = "fs.inotify.max_user_instances=1024"
    elif "max_queued_events" in reason:
        setting = "fs.inotify.max_queued_events=262144"
    else:
        directories, limit = watcher.get("directories"), watcher.get("max_user_watches")
        needed = directories if isinstance(directories, int) else 0
        limit = limit if isinstance(limit, int) else None
        setting = f"fs.inotify.max_user_watches={suggested_watch_limit(needed + watches_in_use(), limit)}"
    return (f"sysctl {setting} (to keep it: echo {setting} > /etc/sysctl.d/60-sparsefs.conf), then remount; "
            "until then every open stats the source file once")


def check_watchers_on_mounts() -> Check:
    """What inotify on a FUSE mount can see: stated, because every watcher tool assumes more (issue 18)."""
    return Check("watchers on a mount", True,
                 "inotify/fanotify watchers on a SparseFS mount see changes made through the mount only; a "
                 "change made to the source elsewhere (mirror: any writer of the source directory; in place: "
                 "a process that held the directory before mounting) reaches reads at once but raises no event "
                 "on the mount (Linux has no fsnotify for FUSE servers)",
                 "watch the source directory itself (mirror mode), or poll; tail -f polls a FUSE file once a "
                 "second: tail -f -s 0.2 FILE", required=False)


def check_dense() -> Check:
    """The optional dense-retrieval extra: without it, hybrid is not an eligible configuration."""
    from readers.retrieval import dense

    if dense.available():
        return Check("dense retrieval", True, "all-MiniLM-L6-v2 int8 (onnxruntime): hybrid location available",
                     required=False)
    return Check("dense retrieval", False, "not available: " + dense.missing_reason(), "pip install 'sparsefs[dense]'",
                 required=False)


CHECKS = (check_dev_fuse, check_libfuse, check_fusermount, check_permissions, check_allow_other,
          check_binding, check_backend, check_kernel_features, check_inotify, check_watchers_on_mounts, check_dense)


def run_checks(out: TextIO, cache: str | None = None) -> int:
    from sparsefs.app.doctor_cache import check_cache  # it builds on Check, defined here

    failed = False
    for check in [*(fn() for fn in CHECKS), *check_mounts(), *([check_cache(cache)] if cache else [])]:
        mark = "ok" if check.ok else ("FAIL" if check.required else "warn")
        out.write(f"[{mark:>4}] {check.name}: {check.detail}\n")
        if (check.fix and not check.ok) or (check.fix and not check.required):
            out.write(f"       fix: {check.fix}\n")
        failed |= check.required and not check.ok
    out.write("all required checks passed\n" if not failed else "some required checks failed\n")
    return 1 if failed else 0
