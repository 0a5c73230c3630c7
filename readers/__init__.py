"""The evidence plane: the Reader contract (``readers.base``) and its Readers.

Nothing is imported here on purpose: Reader modules pull in heavy
dependencies (bm25s, numpy, ...) and are loaded lazily through
``readers.registry``.
"""
