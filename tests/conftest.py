"""Shared fixtures: real mounts of temporary workspaces, always unmounted."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparsefs.fuse import backends
from tests import mountutil

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
DATA = SHARED / "data"
DEMO = Path(__file__).resolve().parents[1] / "sparsefs" / "demo"
# every row of the backend table, and the kernel backend without passthrough (what root gets on Linux < 6.9 and
# an ordinary user everywhere; the ordinary user's own mounts: tests/mount/test_mount_user.py)
BACKENDS = (*(row.name for row in backends.BACKENDS), *mountutil.VARIANTS)
HANG_GUARD_S = mountutil.HANG_GUARD_S
_PACK_HEAD = re.compile(rb"^[^\n]*@[^\n]*( [0-9a-f]{8} \xc2\xb7 |: error: )")


def is_pack(data: bytes | str) -> bool:
    """Whether ``data`` opens like a compact EvidencePack: ``name@action [episode] fingerprint · ...``, or
    ``name@...: error: ...`` (sparsefs.protocol.pack_text)."""
    raw = data.encode("utf-8", "surrogateescape") if isinstance(data, str) else data
    return bool(_PACK_HEAD.match(raw))


def _check_clean(mount: mountutil.Mount) -> None:
    text = mount.stderr()
    assert "Traceback" not in text and " ERROR " not in text, f"daemon printed errors:\n{text}"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A copy of the bundled demo workspace plus a nested folder."""
    src = tmp_path / "src"
    shutil.copytree(DEMO, src)
    (src / "nested" / "deeper").mkdir(parents=True)
    (src / "nested" / "deeper" / "leaf.txt").write_text("leaf\n")
    return src


def kernel_family(backend: str) -> bool:
    """The kernel-protocol backend, with or without passthrough."""
    return mountutil.VARIANTS.get(backend, (backend,))[0] == "kernel"


def skip_unless_available(name: str) -> str:
    """Skip the test when backend ``name`` cannot run here (its row's blocker says why)."""
    blocker = backends.backend_named(mountutil.VARIANTS.get(name, (name,))[0]).blocker()
    if blocker:
        pytest.skip(f"{name} backend unavailable here: {blocker}")
    return name


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """Every mount test runs on every FUSE backend (kernel, mfusepy); the kernel-nopt variant where the path of
    plain files is what is tested (``PACK_ONLY``)."""
    return skip_unless_available(str(request.param))


# Test modules about packs, Readers and the control tree, which the daemon serves the same way with or without
# passthrough (generated files are direct_io from the daemon in both): the kernel-nopt variant of their mount
# tests repeats the kernel one. They run on kernel and mfusepy; every other mount test also on kernel-nopt.
PACK_ONLY = frozenset({
    "test_faults", "test_hostile", "test_mount_control_hidden", "test_mount_empty", "test_mount_full_disk",
    "test_mount_hostile_names", "test_mount_live_log", "test_mount_memory", "test_mount_protocol",
    "test_mount_raw_errors", "test_mount_readers", "test_mount_savings", "test_mount_shared_cache",
    "test_mount_virtual_names", "test_reading", "test_retention", "test_soak", "test_cli",
})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Leave out the kernel-nopt variant of the ``PACK_ONLY`` modules' tests (deselected, not skipped)."""
    kept, left = [], []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        variant = params.get("backend") in mountutil.VARIANTS
        (left if variant and item.module is not None and item.module.__name__.rpartition(".")[2] in PACK_ONLY
         else kept).append(item)
    if left:
        config.hook.pytest_deselected(items=left)
        items[:] = kept


@pytest.fixture
def mirror(workspace: Path, tmp_path: Path, backend: str) -> Iterator[mountutil.Mount]:
    """The workspace mirrored at tmp/mnt."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    with mountutil.mounted(workspace, mnt, tmp_path / "state", backend=backend) as mount:
        yield mount
    _check_clean(mount)


@pytest.fixture
def in_place(workspace: Path, tmp_path: Path, backend: str) -> Iterator[mountutil.Mount]:
    """The workspace mounted over itself."""
    with mountutil.mounted(workspace, None, tmp_path / "state", backend=backend) as mount:
        yield mount
    _check_clean(mount)


