"""SparseFS: a transparent read proxy for AI agents, as a FUSE filesystem.

``sparsefs`` holds the control plane: the FUSE binding and the operations
core, the path grammar, the Read Intent Protocol, fingerprints, the control
tree and the CLI. The evidence plane lives in ``readers``; the Budgeted Read
Gate in ``gate``.
"""

__version__ = "0.1.0"
