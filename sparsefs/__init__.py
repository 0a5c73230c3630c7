"""SparseFS: a transparent read proxy for AI agents, as a FUSE filesystem.

``sparsefs`` holds the control plane: the FUSE binding and the operations
core, the path grammar, the Read Intent Protocol, fingerprints, the control
tree and the CLI. The evidence plane lives in ``readers``; the Budgeted Read
Gate in ``gate``.
"""

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from sparsefs.app.api import ReadFailed, ReadResult, Workspace, encode_text, request_name

__all__ = ["ReadFailed", "ReadResult", "Workspace", "__version__", "encode_text", "request_name"]


def __getattr__(name: str) -> Any:
    """The Python API (sparsefs.app.api), imported on first use (PEP 562): the daemon and the CLI never pay for it."""
    if name in __all__ and name != "__version__":
        from sparsefs.app import api

        return getattr(api, name)
    raise AttributeError(f"module 'sparsefs' has no attribute {name!r}")
