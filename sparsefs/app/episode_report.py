"""``sparsefs episodes``: what was read, under which objective, at what exposure.

From a live mount it reads ``.sparsefs/episodes/*.json`` (what the daemon holds
now); from a source directory or ``--state-dir`` it reads the saved state
read-only, so it works while a mount runs and after it stopped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TextIO

import orjson

from sparsefs.app.compose import default_state_dir
from sparsefs.fuse.mounts import is_sparsefs_mount
from sparsefs.store.state import read_episodes
from sparsefs.vfs.control import CONTROL_DIR

_OBJECTIVE_CHARS = 48


def load(path: str, state_dir: str | None, limit: int) -> list[dict[str, Any]]:
    if state_dir is not None:
        return read_episodes(Path(state_dir), limit)
    where = Path(path).resolve()
    if is_sparsefs_mount(where):
        return _live(where / CONTROL_DIR / "episodes", limit)
    return read_episodes(default_state_dir(where), limit)


def _live(folder: Path, limit: int) -> list[dict[str, Any]]:
    records = [orjson.loads(p.read_bytes()) for p in folder.glob("e*.json")]
    records.sort(key=_order)
    return records[-limit:]


def _order(record: dict[str, Any]) -> int:
    """The order an episode was opened in: its number (ids are hashes since issue 27; old ``e12`` ids: digits)."""
    digits = str(record["id"]).lstrip("e")
    return int(record.get("number") or (digits if digits.isdigit() else 0))


def print_episodes(path: str, state_dir: str | None, episode_id: str | None, as_json: bool, limit: int,
                   out: TextIO) -> int:
    episodes = load(path, state_dir, limit if episode_id is None else 1_000_000)
    if episode_id is not None:
        return _print_one(episodes, episode_id, out)
    if as_json:
        out.writelines(orjson.dumps(_public(e)).decode() + "\n" for e in episodes)
        return 0
    if not episodes:
        out.write("no episodes yet\n")
        return 0
    out.write(f"{'id':>6} {'state':<7} {'reads':>5} {'E':>8} {'L':>10}  artifact · objective\n")
    out.writelines(_row(e) + "\n" for e in episodes)
    return 0


def _print_one(episodes: list[dict[str, Any]], episode_id: str, out: TextIO) -> int:
    for episode in episodes:
        if episode["id"] == episode_id:
            out.write(orjson.dumps(_public(episode), option=orjson.OPT_INDENT_2).decode() + "\n")
            return 0
    out.write(f"no episode {episode_id}\n")
    return 1


def _public(episode: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in episode.items() if k != "artifact_rel"}


def exposed(e: dict[str, Any]) -> int:
    """E: what the agent read in the episode, sparse packs and the full-view pack (``@full``, a fallback) alike
    (gate.budget.total_exposure; a record older than ``full_view_pack_chars`` delivered L)."""
    if not e.get("full_view_delivered"):
        return int(e["exposed_sparse"])
    return int(e["exposed_sparse"]) + int(e.get("full_view_pack_chars", e["full_view_chars"]))


def _row(e: dict[str, Any]) -> str:
    state = "closed" if e["closed"] else "open"
    objective = str(e["objective"])
    if len(objective) > _OBJECTIVE_CHARS:
        objective = objective[: _OBJECTIVE_CHARS - 1] + "…"
    return (f"{e['id']:>6} {state:<7} {e['reads']:>5} {exposed(e):>8,} {e['full_view_chars']:>10,}"
            f"  {e['artifact']} · {objective}")
