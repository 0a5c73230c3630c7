"""The registry is the one source of Reader metadata, and reading it imports no Reader."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from readers import registry

ROOT = Path(__file__).resolve().parents[3]
# Strings that name a Reader's kind or extension but mean something else here: formats of the grammar
# ("text", "json"), the store's own file names (".txt", ".json"), an entry's code version ("code"), and
# the path separator (the folder Reader's "extension").
NOT_READERS = frozenset({"text", "json", "code", ".txt", ".json", "/", "config"})  # config: `git config`

LAZY = """
import sys
from readers import registry
from sparsefs.guard.policy import kind_extensions
from sparsefs.store import serial
from sparsefs.store.parsed import code_version

code_version(), kind_extensions(), serial.class_named("readers.retrieval.bm25index.UnitIndex")
registry.artifact_type("xlsx"), registry.isolated("pdf"), registry.guarding(".pdf")
reader = registry.select("sales.csv", b"region,revenue\\nEU,10\\n")
families = ("readers.pdf", "readers.html", "readers.code", "readers.jsondata", "readers.logs", "pymupdf")
print(reader.name, sorted(m for m in sys.modules if m.startswith(families)))
"""


def test_choosing_a_reader_imports_only_the_one_that_claims_it() -> None:
    """The store's code version, the codec, the guard's kinds and the selector read registrations, not Readers:
    a CSV never imports pymupdf nor any other family."""
    result = subprocess.run([sys.executable, "-c", LAZY], capture_output=True, text=True, timeout=120, check=True)
    assert result.stdout.split(maxsplit=1) == ["table", "[]\n"], result.stdout + result.stderr


def test_the_control_plane_names_no_reader() -> None:
    """No module of sparsefs/ lists Readers, their kinds or their extensions: it reads them from the registry."""
    names = {term for r in registry.registrations() for term in (r.name, *r.kinds, *r.extensions,
                                                                  *r.guarded_extensions)}
    found = []
    for path in sorted((ROOT / "sparsefs").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in names - NOT_READERS:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.value!r}")
    assert not found, "\n".join(found)
