"""The ``sparsefs`` command line."""

from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from sparsefs.app import cli_tools, isolation
from sparsefs.app.daemon import MountError, MountPlan, check_cache, configure_logging, plan_mount, run
from sparsefs.fuse import backends, mounts
from sparsefs.guard.policy import DEFAULT_THRESHOLD, kind_extensions, parse_kinds

READY_TIMEOUT_S = 20.0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sparsefs",
        description="Mount a workspace so agents read compact EvidencePacks through 'file@intent=...'.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    mount = sub.add_parser("mount", help="mount SRC in place, or mirror it at MNT")
    mount.add_argument("source", metavar="SRC")
    mount.add_argument("mountpoint", metavar="MNT", nargs="?", help="mirror here (default: in place over SRC)")
    mount.add_argument("-f", "--foreground", action="store_true",
                       help="stay in the foreground (says where it mounted once ready; Ctrl-C unmounts)")
    mount.add_argument("--nonempty", action="store_true",
                       help="mirror over a MNT that holds files (hidden while mounted; refused without this)")
    mount.add_argument("--state-dir", help="logs and state (default: ~/.cache/sparsefs/<hash>)")
    mount.add_argument("--allow-other", action="store_true", help="let other users in (turns on default_permissions)")
    mount.add_argument("--no-watch", action="store_true",
                       help="check the source on each open instead of watching it (inotify)")
    mount.add_argument("--backend", choices=backends.CHOICES, default="auto",
                       help="kernel: /dev/fuse spoken directly (mount(2) as root, fusermount3 otherwise; "
                            "Linux >= 5.4); mfusepy: libfuse3; auto (default): kernel where it can run, else mfusepy")
    mount.add_argument("--no-passthrough", action="store_true",
                       help="kernel backend: serve plain reads from the daemon through the page cache even where "
                            "kernel passthrough works (root, Linux >= 6.9)")
    mount.add_argument("--no-open", action="store_true",
                       help="kernel backend: a read-only mount whose opens and closes never reach the daemon "
                            "(no OPEN/RELEASE round trip; no passthrough, no guard cards; docs/SEMANTICS.md)")
    mount.add_argument("--readers", type=int, default=1, metavar="N",
                       help="kernel backend: threads reading requests (default 1; see docs/BENCHMARKS.md)")
    mount.add_argument("--spin-us", type=int, default=None, metavar="US",
                       help="kernel backend: keep polling /dev/fuse this many microseconds after a request before "
                            "sleeping (default 200; 0 = never spin: less CPU, slower small-file work)")
    mount.add_argument("--session-intent", metavar="TEXT",
                       help="the session's standing objective; fills in what an access intent leaves out "
                            "(change it later by writing .sparsefs/session)")
    mount.add_argument("--memory-mb", type=int, default=None, metavar="MB",
                       help="the daemon's memory cap: parsed artifacts and packs beyond it are served from the "
                            "state directory (default $SPARSEFS_MEMORY_MB, else min(1024, max(512, RAM/8)); "
                            "docs/SEMANTICS.md, 'Memory')")
    _guard_arguments(mount)
    cli_tools.add_cache_option(mount)
    mount.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    umount = sub.add_parser("umount", help="unmount MNT and wait for its daemon to exit")
    umount.add_argument("mountpoint", metavar="MNT")
    umount.add_argument("-z", "--lazy", action="store_true", help="lazy unmount (detach even when busy)")
    episodes = sub.add_parser("episodes", help="list reading episodes (live from a mount, or saved in the state dir)")
    episodes.add_argument("path", metavar="PATH", nargs="?", default=".",
                          help="a SparseFS mount, or a source directory (default: .)")
    episodes.add_argument("--state-dir", help="read this state directory instead")
    episodes.add_argument("--id", help="show one episode in full (JSON)")
    episodes.add_argument("--json", action="store_true", help="all listed episodes as JSON lines")
    episodes.add_argument("--limit", type=int, default=50, help="newest N episodes (default 50)")
    doctor = sub.add_parser("doctor", help="check /dev/fuse, libfuse, fusermount and permissions; say how to fix each")
    cli_tools.add_cache_option(doctor)
    demo = sub.add_parser("demo", help="mount a bundled sample workspace and show a plain and an evidence read")
    demo.add_argument("--keep", action="store_true", help="leave the demo mounted")
    sub.add_parser("skill", help="print the agent guide (.sparsefs/SKILL.md)").set_defaults(handler=cmd_skill)
    cli_tools.register(sub)  # read, mcp, index, stats, report, clean
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    isolation.scrub_import_path()  # no later import may resolve in the working directory (often the workspace)
    args = build_parser().parse_args(argv)
    handlers = {"mount": cmd_mount, "umount": cmd_umount, "doctor": cmd_doctor, "demo": cmd_demo,
                "episodes": cmd_episodes}
    try:
        return (handlers.get(args.command) or args.handler)(args)
    except MountError as err:
        print(f"sparsefs: {err}", file=sys.stderr)
        return 2


def cmd_mount(args: argparse.Namespace) -> int:
    plan = plan_mount(args.source, args.mountpoint, args.state_dir, args.allow_other, args.backend, args.nonempty)
    plan = dataclasses.replace(plan, watch=not args.no_watch, readers=max(1, args.readers), spin_us=args.spin_us,
                               session_intent=args.session_intent, cache=check_cache(args.cache),
                               memory_mb=args.memory_mb, passthrough=not args.no_passthrough, no_open=args.no_open)
    refused = backends.refused_options(plan.backend, plan.no_open) or _guard_refused(args)
    if refused:
        raise MountError(refused)
    plan = _guard_plan(args, plan)
    plan.state_dir.mkdir(parents=True, exist_ok=True)
    if args.foreground:
        configure_logging(args.verbose)
        return run(plan)
    return _mount_background(args, plan)


def _mount_background(args: argparse.Namespace, plan: MountPlan) -> int:
    log_path = plan.state_dir / "daemon.log"
    command = isolation.python_argv("mount", "-f", str(plan.source), str(plan.mountpoint),
                                    "--state-dir", str(plan.state_dir), "--backend", plan.backend,
                                    "--readers", str(plan.readers))
    command += ["--spin-us", str(plan.spin_us)] if plan.spin_us is not None else []
    command += ["--session-intent", plan.session_intent] if plan.session_intent is not None else []
    command += ["--memory-mb", str(plan.memory_mb)] if plan.memory_mb is not None else []
    command += [f"--guard-pid={pid}" for pid in plan.guard_pids] + [f"--guard-threshold={plan.guard_threshold}"]
    command += [f"--guard-comm={','.join(plan.guard_comms)}"] if plan.guard_comms else []
    command += [f"--guard-kinds={','.join(plan.guard_kinds)}"] if plan.guard_kinds else []
    command += [flag for flag, on in (("--allow-other", args.allow_other), ("--no-watch", args.no_watch),
                                      ("--no-passthrough", args.no_passthrough), ("--no-open", args.no_open),
                                      ("--verbose", args.verbose), ("--nonempty", args.nonempty)) if on]
    env = {**os.environ, **({cli_tools.CACHE_ENV: plan.cache} if plan.cache else {})}  # not argv: ps shows it
    with open(log_path, "ab") as log:
        child = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                 start_new_session=True, env=env, cwd="/")
    if not mounts.wait_ready(plan.mountpoint, READY_TIMEOUT_S, alive=lambda: child.poll() is None, pid=child.pid):
        print(f"sparsefs: mount did not become ready; daemon log {log_path}:", file=sys.stderr)
        print(_tail(log_path), file=sys.stderr)
        if child.poll() is None:
            child.terminate()
        return 1
    mode = "in place" if plan.in_place else f"mirroring {plan.source}"
    print(f"mounted {plan.mountpoint} ({mode}, {plan.backend} backend); daemon pid {child.pid}; log {log_path}")
    if plan.in_place:
        print(f"shells already inside {plan.mountpoint} still see the directory below: run 'cd .' there")
    return 0


def _guard_arguments(mount: argparse.ArgumentParser) -> None:
    """sparsefs.guard.policy: plain reads of large artifacts by these processes get a card that says how to ask."""
    mount.add_argument("--guard-pid", type=int, action="append", default=[], metavar="PID",
                       help="guard this process and all its descendants (repeatable): a plain read of a large "
                            "document gets a short card with how to ask, once per file (docs/SEMANTICS.md)")
    mount.add_argument("--guard-comm", action="append", default=[], metavar="NAME,...",
                       help="guard processes with these names (and their descendants)")
    mount.add_argument("--guard-kinds", type=_kinds, default=None, metavar="KIND,...",
                       help=f"card only these kinds of files (default all: {_kinds_help()})")
    mount.add_argument("--guard-threshold", type=int, default=DEFAULT_THRESHOLD, metavar="CHARS",
                       help=f"card only files whose full view is longer (default {DEFAULT_THRESHOLD:,})")


def _guard_refused(args: argparse.Namespace) -> str | None:
    """The guard acts at open, which ``--no-open`` leaves to the kernel alone; and with no open the kernel
    keeps a generated file's pages for every caller, while a pack is built for what its caller may read."""
    if args.no_open and (args.guard_pid or args.guard_comm):
        return "--no-open and --guard-pid/--guard-comm cannot be combined: the guard cards files at open"
    if args.no_open and args.allow_other:
        return ("--no-open and --allow-other cannot be combined: without opens the kernel shares a pack's pages "
                "between users, and each user's packs must quote only what that user may read")
    return None


def _guard_plan(args: argparse.Namespace, plan: MountPlan) -> MountPlan:
    comms = tuple(name.strip() for given in args.guard_comm for name in given.split(",") if name.strip())
    return dataclasses.replace(plan, guard_pids=tuple(args.guard_pid), guard_comms=comms,
                               guard_threshold=max(0, args.guard_threshold),
                               guard_kinds=tuple(sorted(args.guard_kinds or ())))


def _kinds_help() -> str:
    """'text (.adoc .md ...), html (...)': the guard kinds the registered Readers declare."""
    return ", ".join(f"{kind} ({' '.join(sorted(exts))})" for kind, exts in kind_extensions().items())


def _kinds(text: str) -> frozenset[str]:
    try:
        return parse_kinds(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def cmd_skill(args: argparse.Namespace) -> int:
    from sparsefs.vfs.control import skill_text

    sys.stdout.write(skill_text().decode())
    return 0


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def cmd_umount(args: argparse.Namespace) -> int:
    mountpoint = os.path.abspath(args.mountpoint)
    if not mounts.find_mount(mountpoint):
        print(f"sparsefs: {mountpoint} is not mounted", file=sys.stderr)
        return 1
    pid = _daemon_of(mountpoint)
    try:
        mounts.unmount(mountpoint, lazy=args.lazy)
    except RuntimeError as err:
        print(f"sparsefs: unmount failed: {err} (files still open? try: sparsefs umount -z {mountpoint})",
              file=sys.stderr)
        return 1
    if pid is not None and not _wait_daemon(pid):
        return 1
    print(f"unmounted {mountpoint}")
    return 0


def _daemon_of(mountpoint: str) -> int | None:
    """The pid a live mount's daemon publishes in ``.sparsefs/ready`` (None for a dead or silent mount: a read
    would hang on a silent one)."""
    if mounts.probe(mountpoint) != mounts.LIVE:
        return None
    return mounts.within(lambda: mounts.daemon_pid(mountpoint), mounts.PROBE_S)


def _wait_daemon(pid: int) -> bool:
    """Wait for the daemon to exit as long as it is making progress (freeing memory, saving indexes)."""
    notes: list[str] = []

    def waiting(now: mounts.Progress) -> None:
        if not notes:
            notes.append("said")
            print(f"sparsefs: unmounted; waiting for daemon {pid} to finish (RSS {now.rss_mib} MiB)",
                  file=sys.stderr)

    outcome = mounts.wait_exit_while_busy(pid, waiting=waiting)
    if outcome == "stalled":
        print(f"sparsefs: unmounted, but daemon {pid} has not exited and made no progress for "
              f"{mounts.STALL_S:g} s (kill it: kill {pid})", file=sys.stderr)
    elif outcome == "bounded":
        print(f"sparsefs: unmounted, but daemon {pid} is still busy after {mounts.EXIT_BOUND_S:g} s",
              file=sys.stderr)
    return outcome == "exited"


def cmd_episodes(args: argparse.Namespace) -> int:
    from sparsefs.app.episode_report import print_episodes

    return print_episodes(args.path, args.state_dir, args.id, args.json, args.limit, sys.stdout)


def cmd_doctor(args: argparse.Namespace) -> int:
    from sparsefs.app.doctor import run_checks

    return run_checks(sys.stdout, args.cache)


def cmd_demo(args: argparse.Namespace) -> int:
    from sparsefs.app.demo import run_demo

    return run_demo(keep=args.keep)
