"""The control tree at the mount root: ``.sparsefs/``, built from ordinary sources.

Everything here is generated: SKILL.md (static text shipped in the package),
stats.json and episodes/*.json (snapshots of live state), ready (appears once
the mount serves requests) and log.jsonl (the append-only log file in the
state directory, served live so ``tail -f`` works) are read-only; ``session``
is the one writable file: it reads as the session intent, and what is written
to it becomes the session intent when the writer closes it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources

import orjson

from sparsefs.protocol.episodes import EpisodeStore
from sparsefs.protocol.intents import SessionIntent
from sparsefs.store.stats import Stats

CONTROL_DIR = ".sparsefs"
LOG_NAME = "log.jsonl"
SESSION_FILE = "session"
_JSON = orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS
_DIRS = ("", "episodes", "fsmonitor")
FSMONITOR = "fsmonitor/"  # fsmonitor/<prefix>%<token>: git's fsmonitor hook asks here (sparsefs.vfs.fsmonitor)


def skill_text() -> bytes:
    return resources.files("sparsefs").joinpath("SKILL.md").read_bytes()


@dataclass(frozen=True)
class ControlNode:
    """A directory (content None) or a generated file."""

    is_dir: bool
    content: bytes | None = None
    live_log: bool = False
    writable: bool = False


class ControlTree:
    """Resolves paths below ``.sparsefs`` to nodes."""

    def __init__(
        self, stats: Stats, episodes: EpisodeStore, ready: Callable[[], bytes | None],
        session: SessionIntent | None = None, fsmonitor: Callable[[str], bytes] | None = None,
    ) -> None:
        self.stats = stats
        self._fsmonitor = fsmonitor
        self.episodes = episodes
        self._ready = ready
        self.session = session or SessionIntent()
        self._skill = skill_text()

    @staticmethod
    def is_dir(sub: str) -> bool:
        return sub in _DIRS

    def node(self, sub: str) -> ControlNode | None:
        """``sub`` is the path below .sparsefs ('' for the directory itself)."""
        if sub in _DIRS:
            return ControlNode(is_dir=True)
        if sub == LOG_NAME:
            return ControlNode(is_dir=False, live_log=True)
        if sub == SESSION_FILE:
            return ControlNode(is_dir=False, content=self.session.content(), writable=True)
        if sub.startswith("episodes/"):
            return self._episode(sub.removeprefix("episodes/"))
        if sub.startswith(FSMONITOR) and self._fsmonitor is not None and "%" in sub:
            return ControlNode(is_dir=False, content=self._fsmonitor(sub.removeprefix(FSMONITOR)))
        content = self._file(sub)
        return ControlNode(is_dir=False, content=content) if content is not None else None

    def listdir(self, sub: str) -> list[str]:
        if sub == "episodes":
            return [f"{e.id}.json" for e in self.episodes.all()]
        if sub == "fsmonitor":
            return []  # every name is a query
        names = ["SKILL.md", "stats.json", LOG_NAME, SESSION_FILE, "episodes"]
        return names + (["ready"] if self._ready() is not None else [])

    def log_size(self) -> int:
        return self.stats.log_size()

    def open_log(self) -> int:
        return os.open(self.stats.log_path, os.O_RDONLY | os.O_CLOEXEC)

    def _file(self, name: str) -> bytes | None:
        if name == "SKILL.md":
            return self._skill
        if name == "stats.json":
            return orjson.dumps(self.stats.snapshot(), option=_JSON) + b"\n"
        if name == "ready":
            return self._ready()
        return None

    def _episode(self, name: str) -> ControlNode | None:
        episode = self.episodes.get(name.removesuffix(".json")) if name.endswith(".json") else None
        if episode is None:
            return None
        return ControlNode(is_dir=False, content=orjson.dumps(episode.to_json(), option=_JSON) + b"\n")


def private_control(sub: str) -> bool:
    """Everything in the control tree but the directory itself, SKILL.md and ready: the mount owner's alone."""
    return sub not in ("", "SKILL.md", "ready")


def synthetic(like: os.stat_result, mode: int, size: int, ino: int, nlink: int = 1) -> dict[str, int]:
    """Attributes of a control file or the session: the source root's owner and times, our mode and size."""
    return {
        "st_mode": mode, "st_ino": ino, "st_nlink": nlink, "st_size": size,
        "st_uid": like.st_uid, "st_gid": like.st_gid,
        "st_atime": like.st_atime_ns, "st_mtime": like.st_mtime_ns, "st_ctime": like.st_ctime_ns,
        "st_blksize": 4096, "st_blocks": (size + 511) // 512,
    }
