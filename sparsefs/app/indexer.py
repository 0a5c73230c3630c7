"""``sparsefs index DIR``: warm fingerprints, parsed artifacts and indexes before the first read.

The walk is the Folder Reader's (:func:`sparsefs.source.collection.walk`: confined to
DIR, no symlinks followed, hidden and dependency directories skipped, bounded).
Each file is loaded through an :class:`~sparsefs.artifacts.cache.ArtifactCache` backed
by the state directory's :class:`~sparsefs.store.parsed.ParsedStore` — exactly
what a mount does on its first read — and then asked one throw-away locate, so
a Reader that builds its search index lazily (tables, JSON, logs) builds it now;
the store saves an entry whose index grew at close.

Parsing is CPU-bound Python, so it runs in worker *processes* (``-j``, default
the CPU count; one store per worker, closed when its queue ends, so every entry
is on disk before the summary). Nothing touches episode state, so no state lock
is taken: the store is content-addressed and written by atomic renames, and a
running mount of DIR finds the new entries on its next miss.

DIR may be a SparseFS mount (or a folder in one): then the mount's own source
and state directory are warmed, as its daemon publishes them
(:mod:`sparsefs.app.mountinfo`) — walking the mount and filling another store would
warm nothing the mount reads. Each parse runs under the daemon's bounds
(:mod:`sparsefs.artifacts.bounded`); a worker stuck on one file past
:data:`FILE_TIMEOUT_S`, or dead, is replaced, the file reported as an error,
and the run goes on.

Resumable by construction: a file whose parse is already stored is loaded
(1-5 ms), not parsed, and counted as "warm"; an interrupted run (Ctrl-C) loses
only the files in flight and still prints what it did. Parses cheaper than the
store's threshold (10 ms) are not stored, as in a mount: loading them would
cost about as much as parsing.

With ``--cache URL`` the store sits over a shared tier (``sparsefs.store.shared``):
a file another host already parsed is fetched ("fetched"), and every stored
parse, with the indexes its Reader built, is uploaded before the file counts as
done, so a fleet's mounts find it. ``--embed`` also embeds every unit of long
documents (the hybrid method's vectors, the costliest part of a first read) so
no host embeds them again.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Literal, TextIO

from readers import selection
from readers.base import ReaderError, ReadIntent
from sparsefs.app.compose import build_artifacts, default_state_dir
from sparsefs.app.mountinfo import mount_of_path
from sparsefs.app.reading import ReadFailed, mount_above
from sparsefs.artifacts.bounded import Bounds
from sparsefs.artifacts.cache import Artifact, ArtifactCache
from sparsefs.source.collection import walk
from sparsefs.source.rootfs import SourceRoot
from sparsefs.store.parsed import StoreConfig

Status = Literal["parsed", "warm", "fetched", "unsupported", "error"]
STORE_QUEUE = 256  # a mount's store drops a write when its queue is full; a warm-up run should not
_PARSED_CHARS = 32 * 1024 * 1024  # a worker keeps little in memory: what it parsed is on its way to disk
_WARM_UP = ReadIntent(text="index warm-up", slots=("index warm-up",))
_RESULT_WAIT_S = 0.5
FILE_TIMEOUT_S = 4 * Bounds.seconds  # a parse is bounded by Bounds.seconds; its index build and locate are not


@dataclass(frozen=True)
class FileResult:
    """What indexing one file did."""

    rel: str
    status: Status
    kind: str = "-"
    chars: int = 0
    seconds: float = 0.0
    note: str = ""
    in_cache: bool = False  # the shared tier holds this parse now (fetched from it, or uploaded by this run)
    upload_failed: str = ""  # why it could not (the store's failure kind)


@dataclass
class Summary:
    """Files per kind and status, characters of full views, time."""

    files: list[FileResult] = field(default_factory=list)
    dropped_writes: int = 0
    uploaded_parts: int = 0
    uploaded_bytes: int = 0
    left_out: int = 0
    seconds: float = 0.0
    jobs: int = 1
    interrupted: bool = False
    unreached: int = 0  # files no worker reported on (interrupted, or workers that died at start)
    cache: str = ""  # the shared tier's URL (shown form), if any

    def by_kind(self) -> dict[str, dict[str, int]]:
        table: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for result in self.files:
            row = table[result.kind]
            row["files"] += 1
            row[result.status] += 1
            row["chars"] += result.chars
        return {kind: dict(row) for kind, row in sorted(table.items())}

    def count(self, status: Status) -> int:
        return sum(result.status == status for result in self.files)

    def upload_failures(self) -> dict[str, int]:
        """Files whose parse the shared tier did not take, by why (unreachable, full, refused...)."""
        failures: dict[str, int] = defaultdict(int)
        for result in self.files:
            if result.upload_failed:
                failures[result.upload_failed] += 1
        return dict(failures)


def index_one(cache: ArtifactCache, rel: str, embed: bool = False) -> FileResult:
    """Load ``rel`` as a mount would, then let its Reader build lazy indexes (and embed, with ``embed``); with a
    shared tier, upload what it lacks of the parse."""
    started, parses = time.perf_counter(), cache.parses
    shared = cache.store.shared if cache.store is not None else None
    hits = shared.counts["hits"] if shared is not None else 0
    try:
        artifact = cache.load(rel)
        _warm_indexes(artifact, embed)
    except ReaderError as err:
        return FileResult(rel, "unsupported", seconds=time.perf_counter() - started, note=err.message)
    except Exception as err:  # noqa: BLE001 - one bad file (or a Reader bug) must not stop the run
        return FileResult(rel, "error", seconds=time.perf_counter() - started, note=f"{type(err).__name__}: {err}")
    fetched = shared is not None and shared.counts["hits"] > hits
    status: Status = "parsed" if cache.parses > parses else "fetched" if fetched else "warm"
    kind = f"{artifact.reader.name}/{artifact.parsed.kind}"
    in_cache, failed = _publish(cache, artifact)
    return FileResult(rel, status, kind, len(artifact.parsed.full_view), time.perf_counter() - started,
                      in_cache=in_cache, upload_failed=failed)


def _warm_indexes(artifact: Artifact, embed: bool) -> None:
    """What a first read would build, now: the Reader's lazy index, and with ``embed`` every unit's vector."""
    with contextlib.suppress(ReaderError):  # a Reader that cannot locate in this artifact has nothing to build
        artifact.reader.locate(artifact.parsed, _WARM_UP, 200)
    if embed and selection.size_band(len(artifact.parsed.full_view)) == ">32K":  # where hybrid is chosen
        from readers.retrieval.methods import warm_dense

        warm_dense(artifact.parsed, lambda: False)


def _publish(cache: ArtifactCache, artifact: Artifact) -> tuple[bool, str]:
    """Upload the parse (with what the Reader built since) to the shared tier now: (the store holds it, failure
    kind). A parse the store does not keep (small, or cheap to redo) is not uploaded."""
    store = cache.store
    if store is None or store.shared is None:
        return False, ""
    from sparsefs.store.engines import classify

    try:
        return store.publish(*artifact.parse_key, artifact.parsed) is not None, ""
    except Exception as err:  # noqa: BLE001 - counted by the tier; the file is indexed locally all the same
        return False, classify(err)


@dataclass(frozen=True)
class Started:
    """A worker took ``rel``: if it hangs or dies now, this is the file to blame."""

    pid: int
    rel: str


@dataclass(frozen=True)
class Done:
    """A worker ended its queue; its store had to drop ``dropped`` writes; what it gave the shared tier."""

    pid: int
    dropped: int
    uploaded_parts: int = 0
    uploaded_bytes: int = 0


Message = FileResult | Started | Done


@dataclass(frozen=True)
class Options:
    """What every worker does besides loading: the shared tier's URL, and whether to embed."""

    cache: str | None = None
    embed: bool = False


def _worker(root: str, state_dir: str, options: Options, tasks: multiprocessing.Queue[str | None],
            results: Connection) -> None:
    source = SourceRoot.open(root)
    # The daemon's bounds (each parse of a hostile file in a child with a time and memory limit) and store.
    cache = build_artifacts(source, Path(state_dir), store_config=StoreConfig(queue_size=STORE_QUEUE),
                            max_parsed_chars=_PARSED_CHARS, store_required=True, cache=options.cache)
    store = cache.store
    assert store is not None  # store_required
    try:
        while (rel := tasks.get()) is not None:
            results.send(Started(os.getpid(), rel))
            results.send(index_one(cache, rel, options.embed))
    finally:
        store.close()  # entries (and indexes grown since their save) are on disk before we report done
        source.close()
        counts = store.shared.counts if store.shared is not None else {}
        results.send(Done(os.getpid(), store.dropped, counts.get("uploaded_parts", 0), counts.get("uploaded_bytes", 0)))
        results.close()


def list_members(directory: Path) -> tuple[list[str], int]:
    """The files a folder read would see under ``directory``, and how many the walk bounds left out."""
    source = SourceRoot.open(str(directory))
    try:
        listing = walk(source, "")
    finally:
        source.close()
    return [member.rel for member in listing.members], listing.left_out


def index_files(
    directory: Path, state_dir: Path, members: list[str], jobs: int, file_timeout: float | None = None,
    options: Options | None = None,
) -> Iterator[FileResult | Done]:
    """One result per file as workers finish them (a file whose worker hung or died is an "error"), and each
    worker's Done (dropped store writes, uploads) as it ends."""
    if not members:
        return iter(())
    options = options or Options()
    timeout = file_timeout if file_timeout is not None else FILE_TIMEOUT_S * (8 if options.embed else 1)
    return _Pool(directory, state_dir, timeout, options).run(members, max(1, min(jobs, len(members))))


class _Pool:
    """Worker processes, the file each is on, and a replacement for one that overran or died.

    Each worker answers on its own pipe, written synchronously (a queue's feeder thread would lose what a worker
    said just before it died), so the parent knows which file was in flight when a pipe ends early."""

    def __init__(self, directory: Path, state_dir: Path, file_timeout: float, options: Options) -> None:
        # fork: fast. The parent's other thread (the tasks queue's feeder) holds nothing a child uses, and tqdm's
        # monitor thread is off (see _consume): a replacement worker is forked while the bar runs.
        self.context = multiprocessing.get_context("fork")
        self.args = (str(directory), str(state_dir), options)
        self.tasks: multiprocessing.Queue[str | None] = self.context.Queue()
        self.file_timeout = file_timeout
        self.workers: dict[Connection, multiprocessing.process.BaseProcess] = {}
        self.doing: dict[Connection, tuple[str, float]] = {}

    def run(self, members: list[str], jobs: int) -> Iterator[FileResult | Done]:
        for rel in [*members, *[None] * jobs]:
            self.tasks.put(rel)
        for _ in range(jobs):
            self._spawn()
        try:
            yield from self._collect()
        finally:
            self._stop()

    def _spawn(self) -> None:
        reader, writer = self.context.Pipe(duplex=False)
        worker = self.context.Process(target=_worker, args=(*self.args, self.tasks, writer), daemon=True)
        worker.start()
        writer.close()  # the worker holds the only write end: its exit ends the pipe
        self.workers[reader] = worker

    def _collect(self) -> Iterator[FileResult | Done]:
        while self.workers:
            ready = wait(list(self.workers), timeout=_RESULT_WAIT_S)
            for conn in ready:
                assert isinstance(conn, Connection)
                yield from self._receive(conn)
            yield from self._overdue()

    def _receive(self, conn: Connection) -> Iterator[FileResult | Done]:
        try:
            item: Message = conn.recv()
        except (EOFError, OSError):
            yield from self._retire(conn, "no result: its worker died")
            return
        if isinstance(item, Started):
            self.doing[conn] = (item.rel, time.monotonic())
        elif isinstance(item, Done):
            self.doing.pop(conn, None)
            yield item
        else:
            self.doing.pop(conn, None)
            yield item

    def _overdue(self) -> Iterator[FileResult]:
        now = time.monotonic()
        for conn, (_, since) in list(self.doing.items()):
            if now - since >= self.file_timeout:
                yield from self._retire(conn, f"timed out after {now - since:.0f} s")

    def _retire(self, conn: Connection, note: str) -> Iterator[FileResult]:
        """End a worker; the file it was on is an error, and a replacement takes the rest of its queue."""
        worker = self.workers.pop(conn)
        worker.kill()
        worker.join(timeout=15)
        conn.close()
        job = self.doing.pop(conn, None)
        if job is not None:  # it held a task, not its None: someone must take that None
            yield FileResult(
                job[0], "error", seconds=time.monotonic() - job[1], note=f"{note} (exit code {worker.exitcode})"
            )
            self._spawn()

    def _stop(self) -> None:
        for conn, worker in self.workers.items():
            worker.join(timeout=15)
            if worker.is_alive():
                worker.kill()
            conn.close()


def run_index(directory: str, state_dir: str | None, jobs: int, progress: bool, out: TextIO,
              cache: str | None = None, embed: bool = False) -> int:
    """The ``sparsefs index`` command: index, show progress, print the summary."""
    try:
        root, state = index_target(Path(directory).resolve(), Path(state_dir).resolve() if state_dir else None)
        shown = _check_cache(cache)
    except IndexRefused as err:
        out.write(f"sparsefs: {err}\n")
        return 1
    started = time.monotonic()
    members, left_out = list_members(root)
    summary = Summary(left_out=left_out, jobs=max(1, min(jobs or os.cpu_count() or 1, len(members))), cache=shown)
    options = Options(cache, embed)
    try:
        _consume(index_files(root, state, members, summary.jobs, options=options), summary, len(members), progress)
    except KeyboardInterrupt:
        summary.interrupted = True
    summary.seconds = time.monotonic() - started
    summary.unreached = len(members) - len(summary.files)
    out.write(render_summary(summary, Path(directory).resolve(), state))
    failed = summary.count("error") or summary.interrupted or summary.unreached or summary.upload_failures()
    return 1 if failed else 0


def _check_cache(url: str | None) -> str:
    """The shown form of a ``--cache`` URL an engine here can serve; IndexRefused if none can."""
    if not url:
        return ""
    from sparsefs.store.engines import EngineUnavailable, open_engine, parse_url

    try:
        config = parse_url(url)
        open_engine(config).close()
    except EngineUnavailable as err:
        raise IndexRefused(str(err)) from None
    return config.shown


class IndexRefused(Exception):
    """``sparsefs index`` cannot warm what was asked; the message says what to run instead."""


def index_target(directory: Path, state_dir: Path | None) -> tuple[Path, Path]:
    """The source to walk and the store to fill. For a SparseFS mount (or a folder in one) that is the mount's
    own source and state directory: warming anything else would not warm the mount."""
    if not directory.is_dir():
        raise IndexRefused(f"{directory} is not a directory")
    try:
        above = mount_above(directory)
    except ReadFailed as err:
        raise IndexRefused(str(err)) from None
    if above is None:
        return directory, state_dir or default_state_dir(directory)
    info = mount_of_path(above[0])
    if info is None:
        raise IndexRefused(
            f"{directory} is in the SparseFS mount at {above[0]}, whose state directory is not "
            f"visible here; run: sparsefs index SOURCE --state-dir STATE_DIR (the mount's)"
        )
    if state_dir is not None and state_dir != Path(info.state_dir):
        raise IndexRefused(
            f"{directory} is in the SparseFS mount at {above[0]}, whose state directory is "
            f"{info.state_dir}, not {state_dir}; leave out --state-dir"
        )
    return info.source_path / above[1], Path(info.state_dir)


def _shared_lines(summary: Summary) -> list[str]:
    """What the shared tier got: files fetched from it, parts given to it, files it did not take and why."""
    if not summary.cache:
        return []
    held = sum(result.in_cache for result in summary.files)
    lines = [f"shared cache {summary.cache}: {held:,} files in it now ({summary.count('fetched'):,} fetched from it); "
             f"this run uploaded {summary.uploaded_parts:,} parts, {summary.uploaded_bytes / 1e6:,.1f} MB"]
    failures = summary.upload_failures()
    if failures:
        why = ", ".join(f"{kind}: {count:,}" for kind, count in sorted(failures.items()))
        lines.append(f"shared cache: {sum(failures.values()):,} files not uploaded ({why}); run again once it "
                     "answers (sparsefs doctor --cache URL)")
    return lines


def _consume(stream: Iterator[FileResult | Done], summary: Summary, total: int, progress: bool) -> None:
    import tqdm

    tqdm.tqdm.monitor_interval = 0  # no monitor thread: a replacement worker is forked while the bar runs
    with tqdm.tqdm(total=total, unit="file", disable=not progress, desc="indexing", leave=False) as bar:
        for result in stream:
            if isinstance(result, Done):
                summary.dropped_writes += result.dropped
                summary.uploaded_parts += result.uploaded_parts
                summary.uploaded_bytes += result.uploaded_bytes
                continue
            summary.files.append(result)
            bar.update(1)


def render_summary(summary: Summary, root: Path, state: Path) -> str:
    """The table printed at the end of a run."""
    lines = [
        f"indexed {len(summary.files):,} files under {root} in {summary.seconds:.1f} s "
        f"({summary.jobs} worker{'s' if summary.jobs != 1 else ''}); store: {state / 'index'}",
        f"{'kind':<22} {'files':>6} {'parsed':>7} {'warm':>6} {'chars':>13}",
    ]
    for kind, row in summary.by_kind().items():
        if kind == "-":
            continue
        warm = row.get("warm", 0) + row.get("fetched", 0)
        lines.append(f"{kind:<22} {row['files']:>6,} {row.get('parsed', 0):>7,} {warm:>6,} {row['chars']:>13,}")
    total_chars = sum(result.chars for result in summary.files)
    lines.append(
        f"{'total':<22} {len(summary.files):>6,} {summary.count('parsed'):>7,} "
        f"{summary.count('warm') + summary.count('fetched'):>6,} {total_chars:>13,}"
    )
    lines += _shared_lines(summary)
    lines += [
        f"not indexed: {result.rel}: {result.note}"
        for result in summary.files
        if result.status in ("unsupported", "error")
    ][:20]
    if summary.left_out:
        lines.append(f"left out by the walk bounds: {summary.left_out:,}")
    if summary.unreached:
        lines.append(f"not reached: {summary.unreached:,} files")
    if summary.interrupted:
        lines.append("interrupted: run the same command again to go on (what is stored is not parsed again)")
    if summary.dropped_writes:
        lines.append(f"store writes dropped (queue full): {summary.dropped_writes:,}; run again to store them")
    return "\n".join(lines) + "\n"
