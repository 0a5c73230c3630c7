"""The Python API: SparseFS reads for harnesses that embed it, no FUSE needed.

::

    from sparsefs import Workspace

    ws = Workspace("./workspace")
    pack = ws.ask("report.pdf", "intent", "R&D expenses 2023; headcount")
    print(pack.text)                                   # the EvidencePack, as `cat` would show it
    data = ws.ask("report.pdf", "refine", "staff", fmt="json").json()
    ws.read("sales.csv@sum=revenue&where=region:EU")   # the path grammar, verbatim

Every read goes through the same grammar, Protocol, Readers, Gate and episode
state as a mount (see :mod:`sparsefs.app.reading` for how a running mount of the
same source is shared). Outside a ``with`` block each read takes the state
directory's lock for its own duration; inside one, the lock and the warm core
are kept until the block ends (faster; a mount of the same source waits up to
30 s for the block, then is refused). ``Workspace(..., keep_warm=True)`` keeps
parsed artifacts in memory across reads and blocks until ``close()``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Literal

from sparsefs.app.compose import default_state_dir
from sparsefs.app.reading import (
    LocalCore,
    Plan,
    ReadFailed,
    ReadResult,
    Span,
    WarmCache,
    plan_read,
    serve,
    split_target,
)
from sparsefs.protocol.grammar import OPTION_KEYS

__all__ = ["ReadFailed", "ReadResult", "Workspace", "encode_text", "request_name"]

DEFAULT_TIMEOUT_S = 60.0
_ENCODE = str.maketrans({"%": "%25", "/": "%2F", "&": "%26"})


def encode_text(text: str) -> str:
    """Text as a literal argument or option value: '%', '/' and '&' percent-encoded."""
    return text.translate(_ENCODE)


def request_name(
    path: str, action: str = "intent", argument: str | None = None, options: Mapping[str, str | int] | None = None
) -> str:
    """``path@action[=argument][&key=value...]``, every value encoded so it is taken literally."""
    unknown = sorted(set(options or {}) - OPTION_KEYS)
    if unknown:
        raise ReadFailed(f"unknown option {', '.join(unknown)}; known: {', '.join(sorted(OPTION_KEYS))}")
    name = f"{path.rstrip('/') or '.'}@{action}"
    if argument:
        name += "=" + encode_text(argument)
    for key, value in (options or {}).items():
        name += f"&{key}={encode_text(str(value))}"
    return name


class Workspace:
    """A source directory read through SparseFS without mounting it."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        state_dir: str | os.PathLike[str] | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        keep_warm: bool = False,
        cache: str | None = None,
    ) -> None:
        """``keep_warm``: keep parsed artifacts in memory between reads (a long-lived server), until close().
        ``cache``: a shared parse cache URL (``--cache``), used when reads are served in this process."""
        self.root = Path(root).resolve()
        if not self.root.is_dir():
            raise ReadFailed(f"root {self.root} is not a directory")
        self.state_dir = Path(state_dir).resolve() if state_dir else default_state_dir(self.root)
        self.timeout = timeout
        self.keep_warm = keep_warm
        self.cache = cache
        if cache:
            _check_cache(cache)
        self._held: Plan | None = None
        self._warm: WarmCache | None = None

    def _plan(self) -> Plan:
        if self.keep_warm and self._warm is None:
            self._warm = WarmCache(self.root, self.state_dir, self.cache)
        return plan_read(self.root, self.state_dir, self.timeout, warm=self._warm, cache=self.cache)

    def read(self, target: str) -> ReadResult:
        """Read ``target`` (``rel@suffix`` in the path grammar, relative to the root) as a mount would serve it."""
        return self._serve(target, None)

    def _serve(self, target: str, span: Span) -> ReadResult:
        rel = split_target(self.root, target)
        if self._held is not None:
            return serve(self._held, rel, target, self.timeout, span)
        plan = self._plan()
        try:
            return serve(plan, rel, target, self.timeout, span)
        finally:
            _close(plan)

    def ask(
        self,
        path: str,
        action: str = "intent",
        argument: str | None = None,
        *,
        options: Mapping[str, str | int] | None = None,
        fmt: Literal["text", "json"] = "text",
    ) -> ReadResult:
        """One protocol access: ``action`` (intent, collect, refine, verify, focus, scout, full, or an exact
        operation such as sum) with its argument taken literally, plus options (k, scope, budget, where...)."""
        merged: dict[str, str | int] = dict(options or {})
        if fmt == "json":
            merged["format"] = "json"
        return self.read(request_name(path, action, argument, merged))

    def preview(self, path: str, fmt: Literal["text", "json"] = "text") -> ReadResult:
        """The bounded Object Preview (``@scout``)."""
        return self.ask(path, "scout", fmt=fmt)

    def raw(self, path: str, start: int = 0, end: int | None = None) -> bytes:
        """The original bytes ``[start, end)`` (``@raw``; the whole file when no range is given)."""
        if start < 0 or (end is not None and end < start):
            raise ReadFailed(f"bad byte range {start}-{end}: need 0 <= start <= end")
        return self._serve(f"{path.rstrip('/')}@raw", (start, end)).content

    def __enter__(self) -> Workspace:
        if self._held is None:
            self._held = self._plan()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.release()

    def release(self) -> None:
        """Release the lock and the core held by a ``with`` block (``keep_warm`` artifacts stay)."""
        if self._held is not None:
            _close(self._held)
            self._held = None

    def close(self) -> None:
        """Release what a ``with`` block holds and the parsed artifacts kept by ``keep_warm``."""
        self.release()
        if self._warm is not None:
            self._warm.close()
            self._warm = None

    @property
    def route(self) -> str:
        """Where reads go while held: 'mount', 'in-process', or 'per-read' outside a ``with`` block."""
        if self._held is None:
            return "per-read"
        return "in-process" if self._held.local is not None else "mount"


def _check_cache(url: str) -> None:
    """A cache URL no engine here can serve fails at once, as ReadFailed (one that is down does not)."""
    from sparsefs.store.engines import EngineUnavailable, open_engine, parse_url

    try:
        open_engine(parse_url(url)).close()
    except EngineUnavailable as err:
        raise ReadFailed(str(err)) from None


def _close(plan: Plan) -> None:
    local: LocalCore | None = plan.local
    if local is not None:
        local.close()
