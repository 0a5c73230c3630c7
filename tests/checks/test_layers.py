"""The layer order of docs/ARCHITECTURE.md, checked over the source tree with ast.

Every import (top-level, inside a function, or under TYPE_CHECKING) must point
down or sideways: a module may import its own layer and the layers below it,
never one above. Reader families (``readers/pdf``, ``readers/table``, ...) never
import one another; what two families share lives in ``readers/kit`` or
``readers/retrieval``. The two FUSE backends never import one another.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Lowest first. A module's layer is its first dotted parts that appear here (longest match).
LAYERS: list[tuple[str, ...]] = [
    ("gate",),
    ("readers.actions", "readers.base", "readers.ops", "readers.escape"),  # the contract, its actions table, escaping
    ("readers.retrieval", "readers.selection"),
    ("readers.kit", "readers.claims"),
    ("readers.text",),
    ("readers.pdf", "readers.table", "readers.jsondata", "readers.logs", "readers.code", "readers.html"),
    ("readers.folder",),
    ("readers.registry", "readers"),
    ("sparsefs.store",),
    ("sparsefs.source",),
    ("sparsefs.artifacts",),
    ("sparsefs.protocol",),
    ("sparsefs.guard",),
    ("sparsefs.vfs",),
    ("sparsefs.fuse",),
    ("sparsefs.app", "sparsefs"),
]
# Units of one layer that must not import one another.
SIBLINGS: list[frozenset[str]] = [
    frozenset(LAYERS[5]),
    frozenset({"readers.kit", "readers.claims"}),
    frozenset({"sparsefs.fuse.kernel", "sparsefs.fuse.libfuse"}),
]
OWN = ("gate", "readers", "sparsefs")


def unit_of(module: str) -> tuple[int, str]:
    """(layer index, the unit name) of a dotted module name: the longest listed prefix."""
    best: tuple[int, str] | None = None
    for index, units in enumerate(LAYERS):
        for unit in units:
            if (module == unit or module.startswith(unit + ".")) and (best is None or len(unit) > len(best[1])):
                best = (index, unit)
    if best is None:
        raise KeyError(f"{module} is in no layer: add it to LAYERS and docs/ARCHITECTURE.md")
    return best


def sibling_unit(module: str) -> tuple[int, str] | None:
    """(group, unit) of the sibling unit (a Reader family, a FUSE backend) a module belongs to, if any."""
    for index, group in enumerate(SIBLINGS):
        for unit in group:
            if module == unit or module.startswith(unit + "."):
                return index, unit
    return None


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(source: str, module: str, is_package: bool) -> list[tuple[int, str]]:
    """(line, imported module) of every import of our own packages, relative imports resolved."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")[: len(module.split(".")) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, *([base] if base else [])])
            # ``from pkg import sub`` may name a submodule: judge by the most specific name
            found += [(node.lineno, _specific(base, alias.name)) for alias in node.names]
    return [(line, name) for line, name in found if name.split(".")[0] in OWN]


def _specific(base: str, name: str) -> str:
    candidate = f"{base}.{name}"
    path = ROOT / candidate.replace(".", "/")
    return candidate if path.with_suffix(".py").exists() or (path / "__init__.py").exists() else base


def violations(source: str, module: str, is_package: bool = False) -> list[str]:
    """Why each import of ``module`` runs against the layer order (empty when none does)."""
    layer, _ = unit_of(module)
    own_sibling = sibling_unit(module)
    out = []
    for line, target in imports_of(source, module, is_package):
        target_layer, _ = unit_of(target)
        if target_layer > layer:
            out.append(f"{module}:{line} imports {target} from a higher layer")
        target_sibling = sibling_unit(target)
        same_group = own_sibling and target_sibling and own_sibling[0] == target_sibling[0]
        if same_group and own_sibling != target_sibling:
            out.append(f"{module}:{line} ({own_sibling[1]}) imports {target} ({target_sibling[1]})")
    return out


def _sources() -> list[Path]:
    return sorted(p for package in OWN for p in (ROOT / package).rglob("*.py"))


def test_every_module_has_a_layer() -> None:
    for path in _sources():
        unit_of(module_name(path))


def test_no_import_runs_against_the_layer_order() -> None:
    found = []
    for path in _sources():
        found += violations(path.read_text(), module_name(path), path.name == "__init__.py")
    assert not found, "\n".join(found)


@pytest.mark.parametrize(("module", "source"), [
    ("readers.base", "from readers.text import TextReader\n"),
    ("readers.pdf.reader", "from readers.table import reader\n"),
    ("readers.kit.lines", "import sparsefs.protocol.pack\n"),
    ("sparsefs.store.state", "def f():\n    from sparsefs.vfs.core import Core\n"),
    ("sparsefs.protocol.access", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                 "    from sparsefs.app.daemon import run\n"),
    ("sparsefs.fuse.kernel.session", "from sparsefs.fuse.libfuse import binding\n"),
    ("gate.budget", "from readers.base import Batch\n"),
])
def test_the_check_catches_an_upward_or_sideways_import(module: str, source: str) -> None:
    assert violations(source, module), f"{module}: {source!r} passed the layer check"


@pytest.mark.parametrize(("module", "source"), [
    ("readers.pdf.reader", "from readers.retrieval import segment\nfrom readers.text import TextReader\n"),
    ("sparsefs.vfs.core", "from sparsefs.protocol.access import Protocol\nfrom gate import Budget\n"),
    ("sparsefs.fuse.kernel.ops", "from . import proto\nfrom ..errors import to_errno\n"),
])
def test_the_check_allows_downward_imports(module: str, source: str) -> None:
    assert not violations(source, module), violations(source, module)


def test_top_level_packages_stay_small() -> None:
    """A newcomer sees the layers as folders: each top-level package holds only a few modules."""
    for package in ("sparsefs", "readers"):
        modules = list((ROOT / package).glob("*.py"))
        assert len(modules) <= 10, sorted(p.name for p in modules)
