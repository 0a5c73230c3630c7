"""Nothing in a served tree is ever imported or run: how SparseFS starts Python and keeps its import path.

The daemon often runs as root over a tree an untrusted agent writes. Python
puts the working directory (``python -m``, ``-c``) or the script's directory
first on ``sys.path``, and honours ``PYTHONPATH``, ``PYTHONSTARTUP`` and the
user site; any of them can make an import resolve to a file the agent planted
(``sparsefs/__main__.py``, ``xxhash.py``, ``readers/__init__.py`` in the
workspace). So:

* every Python process SparseFS starts (the daemon of ``sparsefs mount`` and
  ``sparsefs demo``, ``sparsefs umount`` from the demo) is started by
  :func:`python_argv`: ``python -I`` (no working directory or script directory
  on the path, no ``PYTHON*`` variables, no user site) with its working
  directory ``/``, importing our own packages from exactly where the launching
  process imported them (a snapshot on ``PYTHONPATH`` stays that snapshot);
* every ``sparsefs`` command drops, before it does anything, the import path
  entries a working directory can reach (:func:`scrub_import_path`), so a lazy
  import later (a Reader's library, after a ``chdir``) never resolves in it;
* a mount refuses a source or mountpoint that holds any directory Python
  imports from, or lies inside one (:func:`served_code`): the agent could
  rewrite the daemon's own code there, and in place the daemon would import
  through its own mount.

Parse children are forked from a daemon so isolated and move to ``/`` too
(``sparsefs.artifacts.bounded``).
"""

from __future__ import annotations

import importlib.machinery
import os
import sys
from collections.abc import Iterable
from pathlib import Path

OWN_PACKAGES = ("sparsefs", "readers", "gate")
_BOOT = "import sys; sys.path += {paths!r}; from sparsefs.app.cli import main; sys.exit(main())"


def own_code_dirs() -> list[str]:
    """The directories our packages were imported from (each package's parent), in order."""
    dirs: list[str] = []
    for name in OWN_PACKAGES:
        module = sys.modules.get(name) or __import__(name)
        for location in getattr(module, "__path__", ()):
            parent = os.path.dirname(os.path.abspath(location))
            if parent not in dirs:
                dirs.append(parent)
    return dirs


def python_argv(*args: str) -> list[str]:
    """A ``sparsefs`` command line run by this interpreter, isolated (run it with ``cwd="/"``).

    ``-I`` drops the working directory, ``PYTHON*`` variables and the user site; ``-c`` (not ``-m``, which would
    look the package up on the path first) then imports our packages from where this process has them."""
    return [sys.executable, "-I", "-c", _BOOT.format(paths=own_code_dirs()), *args]


def scrub_import_path() -> None:
    """Drop the entries a working directory reaches: '' and other relative paths a plain file finder would
    resolve against the current directory, and the directory ``-m``/``-c`` put first (the cwd at start).

    Relative entries a path hook of its own claims (an editable install's finder marker) stay: they name no
    directory. Our own packages are imported already, so nothing they need is lost."""
    own_code_dirs()  # import them (and note where from) before their directory may leave the path
    started_in = os.getcwd() if _cwd_added() else None
    sys.path[:] = [entry for entry in sys.path if not _reaches_cwd(entry) and entry != started_in]


def _cwd_added() -> bool:
    """Did the interpreter put the working directory at the front (``-m``, ``-c``, the REPL)?"""
    if sys.flags.isolated or getattr(sys.flags, "safe_path", False) or not sys.path:
        return False
    return sys.path[0] in ("", os.getcwd()) and not _is_script_dir(sys.path[0])


def _is_script_dir(entry: str) -> bool:
    """``python script.py`` puts the script's own directory first: that is not the working directory's doing
    unless the script lives there (then it was run from there, and it is the caller's choice)."""
    script = sys.argv[0] if sys.argv else ""
    return bool(script) and script not in ("-c", "-m") and os.path.isfile(script) and not script.endswith(
        "__main__.py") and os.path.dirname(os.path.abspath(script)) == entry


def _reaches_cwd(entry: str) -> bool:
    if os.path.isabs(entry):
        return False
    finder = sys.path_importer_cache.get(entry)
    return finder is None or isinstance(finder, importlib.machinery.FileFinder)


def import_dirs() -> list[str]:
    """Every directory this process may import from: the absolute path entries, our packages' homes, and the
    interpreter's prefix (its standard library and site-packages live there)."""
    dirs = [entry for entry in sys.path if os.path.isabs(entry)] + own_code_dirs()
    dirs += [sys.prefix, os.path.dirname(os.path.realpath(sys.executable))]
    return list(dict.fromkeys(os.path.realpath(entry) for entry in dirs))


def served_code(trees: Iterable[Path]) -> str | None:
    """The first import directory inside one of ``trees``, or holding one (resolved paths), or None: a mount
    must refuse it. Inside: the agent could rewrite what Python imports; holding: a served folder under an
    import directory is itself importable by its name (``site-packages/xxhash`` as ``import xxhash``)."""
    resolved = [Path(os.path.realpath(tree)) for tree in trees]
    for entry in import_dirs():
        for tree in resolved:
            if Path(entry).is_relative_to(tree) or tree.is_relative_to(entry):
                return entry
    return None
