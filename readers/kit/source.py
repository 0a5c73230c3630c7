"""An ArtifactSource over bytes already in memory: what the daemon, the tests and the benchmarks hand a Reader.

The daemon reads a file's bytes once (to fingerprint them) and parses from those; tests and benchmarks
parse samples they built. All of them need the same small class, and it lives here, below ``sparsefs``,
so that the evidence plane's own tests and scripts do not have to import the daemon to get it.
"""

from __future__ import annotations

from dataclasses import dataclass

from readers.base import ArtifactSource, ArtifactTooLarge

TOO_LARGE_HINT = "read ranges of the original with @raw (e.g. head -c / tail -c)"


@dataclass(frozen=True)
class MemorySource:
    """An ArtifactSource over ``data``, named ``name`` (the base name decides the Reader's kind)."""

    name: str
    data: bytes

    @property
    def size(self) -> int:
        """Size in bytes."""
        return len(self.data)

    def read_bytes(self, limit: int) -> bytes:
        """The bytes; ArtifactTooLarge past ``limit``, as a Reader's bound asks of any source."""
        if len(self.data) > limit:
            raise ArtifactTooLarge(
                f"artifact is {len(self.data):,} bytes, over this Reader's {limit:,}-byte bound", hint=TOO_LARGE_HINT
            )
        return self.data


def read_within(source: ArtifactSource, limit: int, reader: str, hint: str) -> bytes:
    """The source's bytes, refused up front (before reading) when its size is over the Reader's bound:
    ``reader`` names the Reader in the message, ``hint`` says what to ask instead."""
    if source.size > limit:
        raise ArtifactTooLarge(f"{source.size:,} bytes is over the {reader} Reader's {limit:,}-byte bound", hint=hint)
    return source.read_bytes(limit)
