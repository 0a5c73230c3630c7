"""The subcommands that reach the core without a mount: read, mcp, index, stats, report, clean.

``register`` adds them to the ``sparsefs`` parser; each sets ``handler`` so
``cli.main`` dispatches without knowing them. Heavy imports (the MCP SDK,
matplotlib) happen inside the handlers, so ``sparsefs --help`` stays fast.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

Handler = Callable[[argparse.Namespace], int]
CACHE_ENV = "SPARSEFS_CACHE"


def add_cache_option(parser: argparse.ArgumentParser) -> None:
    """``--cache URL``: the shared tier under the parsed store (default $SPARSEFS_CACHE, which keeps a password
    out of the process list)."""
    parser.add_argument("--cache", metavar="URL", default=os.environ.get(CACHE_ENV) or None,
                        help="a parse cache shared by many hosts: redis://HOST:6379/0 (Valkey, rediss://, "
                             "redis+cluster://), file:///shared/path or s3://bucket/prefix; ?timeout=S bounds a "
                             f"read's wait (default 2), ?write=0 only fetches (default ${CACHE_ENV}; "
                             "docs/SEMANTICS.md, 'Shared cache')")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add read, mcp, index, stats, report, clean and fsmonitor to the subcommands of ``sparsefs``."""
    from sparsefs.app import clean, fsmonitor_hook

    fsmonitor_hook.register(sub)
    _register_read(sub)
    _register_mcp(sub)
    _register_index(sub)
    _register_stats(sub)
    clean.register(sub)


def _register_read(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    read = sub.add_parser("read", help="read 'PATH@...' without a mount (through a running mount of it if any)")
    read.add_argument("target", metavar="PATH[@...]",
                      help="a path below the root, with or without an @ suffix in the path grammar")
    read.add_argument("--intent", metavar="TEXT", help="the argument of --action (taken literally: no escaping)")
    read.add_argument("--action", metavar="ACTION",
                      help="intent (default with --intent), scout, focus, collect, refine, verify, full, raw, "
                           "or an exact operation (sum, count, path, filter...)")
    read.add_argument("-k", type=int, help="evidence items per slot")
    read.add_argument("--scope", help="restrict the read (p10-20, L1-400, a sheet, a key path)")
    read.add_argument("--budget", type=int, help="per-pack character budget")
    read.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                      help="another option (where, by, cols, rows, sheet, since, until); repeatable")
    read.add_argument("--json", action="store_true", help="the pack as JSON (&format=json)")
    _add_root_options(read)
    add_cache_option(read)
    read.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for a mount or the lock")
    read.add_argument("-v", "--verbose", action="store_true", help="say on stderr which route served the read")
    read.set_defaults(handler=cmd_read)


def _add_root_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--root", default=".", help="the source directory paths are relative to (default: .)")
    parser.add_argument("--state-dir", help="state directory (default: the one a mount of the root uses)")


def _register_mcp(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    mcp = sub.add_parser("mcp", help="serve sro_preview, sro_read and sro_raw over MCP (stdio) for hosts without FUSE")
    _add_root_options(mcp)
    add_cache_option(mcp)
    mcp.set_defaults(handler=cmd_mcp)


def _register_index(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    index = sub.add_parser("index", help="warm fingerprints, parsed text and indexes of a whole workspace")
    index.add_argument("directory", metavar="DIR")
    index.add_argument("--state-dir", help="state directory (default: the one a mount of DIR uses)")
    index.add_argument("-j", "--jobs", type=int, default=0, help="parallel workers (default: CPU count)")
    index.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_cache_option(index)
    index.add_argument("--embed", action="store_true",
                       help="also embed every unit of long documents for hybrid reads (the dense extra), so no "
                            "host embeds them again: slow, for warming a --cache shared by a fleet")
    index.set_defaults(handler=cmd_index)


def _register_stats(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    for name, helptext in (("stats", "characters exposed vs full reads, per kind and episode, from the log"),
                           ("report", "the same as an HTML page with a PNG chart")):
        parser = sub.add_parser(name, help=helptext)
        parser.add_argument("path", metavar="PATH", nargs="?", default=".",
                            help="a SparseFS mount or a source directory (default: .)")
        parser.add_argument("--state-dir", help="read this state directory's log.jsonl instead")
        if name == "report":
            parser.add_argument("-o", "--output", default="sparsefs-report", metavar="DIR",
                                help="where to write index.html and chart.png (default: ./sparsefs-report)")
        else:
            parser.add_argument("--json", action="store_true", help="the summary as JSON (every episode)")
            shown = parser.add_mutually_exclusive_group()
            shown.add_argument("--limit", type=int, default=20, metavar="N",
                               help="list the newest N episodes (default 20; the rest are counted)")
            shown.add_argument("--all", action="store_true", help="list every episode")
        parser.set_defaults(handler=cmd_stats if name == "stats" else cmd_report)


def _options(args: argparse.Namespace) -> dict[str, str | int]:
    options: dict[str, str | int] = {}
    for key, value in (("k", args.k), ("scope", args.scope), ("budget", args.budget)):
        if value is not None:
            options[key] = value
    for pair in args.option:
        key, sep, value = pair.partition("=")
        if not sep:
            raise ValueError(f"--option needs KEY=VALUE, got {pair!r}")
        options[key] = value
    if args.json:
        options["format"] = "json"
    return options


def _read_target(args: argparse.Namespace) -> str:
    from sparsefs.app.api import encode_text, request_name

    target: str = args.target
    options = _options(args)
    if args.action is None and args.intent is None:
        if "@" not in target:
            raise ValueError("say what to read: PATH@intent=... (or @scout, @focus=...), or --intent/--action")
        return target + "".join(f"&{k}={encode_text(str(v))}" for k, v in options.items())
    return request_name(target, args.action or "intent", args.intent, options)


def cmd_read(args: argparse.Namespace) -> int:
    from sparsefs.app.api import ReadFailed, Workspace

    try:
        workspace = Workspace(args.root, args.state_dir, timeout=args.timeout, cache=args.cache)
        result = workspace.read(_read_target(args))
    except (ReadFailed, ValueError, OSError, TimeoutError) as err:
        print(f"sparsefs: {err}", file=sys.stderr)
        return 1
    if args.verbose:
        where = f" ({result.mountpoint})" if result.mountpoint else ""
        print(f"sparsefs: served {result.route}{where}", file=sys.stderr)
    sys.stdout.buffer.write(result.content)
    sys.stdout.flush()
    return 0


def cmd_mcp(args: argparse.Namespace) -> int:
    from sparsefs.app.api import ReadFailed

    try:
        from sparsefs.app.mcp_server import run_stdio
    except ImportError as err:
        return _missing_extra("mcp", "the MCP SDK", err)
    try:
        return run_stdio(args.root, args.state_dir, args.cache)
    except (ReadFailed, ValueError) as err:
        print(f"sparsefs: {err}", file=sys.stderr)
        return 1


def cmd_index(args: argparse.Namespace) -> int:
    from sparsefs.app.indexer import run_index

    return run_index(args.directory, args.state_dir, args.jobs, progress=not args.no_progress, out=sys.stdout,
                     cache=args.cache, embed=args.embed)


def cmd_stats(args: argparse.Namespace) -> int:
    from sparsefs.app.report import print_stats

    return print_stats(args.path, args.state_dir, args.json, sys.stdout, None if args.all else max(0, args.limit))


def cmd_report(args: argparse.Namespace) -> int:
    from sparsefs.app.report import write_report

    try:
        import matplotlib  # noqa: F401 - checked before any work: the chart needs it
    except ImportError as err:
        return _missing_extra("report", "matplotlib", err)
    return write_report(args.path, args.state_dir, args.output, sys.stdout)


def _missing_extra(extra: str, what: str, err: ImportError) -> int:
    """An optional surface whose library is not installed: say how to get it."""
    print(f"sparsefs: {what} is not installed ({err}); install it with: pip install 'sparsefs[{extra}]'",
          file=sys.stderr)
    return 2
