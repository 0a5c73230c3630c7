"""Choosing a backend: kernel passthrough where it can run, mfusepy everywhere else."""

from __future__ import annotations

import pytest

from sparsefs.fuse import backends


def test_auto_picks_kernel_when_nothing_blocks_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backends, "kernel_backend_blocker", lambda: None)
    assert backends.choose("auto")[0] == "kernel"
    assert backends.choose("kernel")[0] == "kernel"
    assert backends.choose("mfusepy") == ("mfusepy", "requested with --backend mfusepy")


def test_auto_falls_back_to_mfusepy_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backends, "kernel_backend_blocker", lambda: "kernel 6.1 has no FUSE passthrough")
    backend, reason = backends.choose("auto")
    assert backend == "mfusepy" and "6.1" in reason
    with pytest.raises(ValueError, match=r"kernel 6\.1"):
        backends.choose("kernel")


def test_blockers_name_capability_and_kernel_version(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backends, "has_cap_sys_admin", lambda: False)
    assert "CAP_SYS_ADMIN" in str(backends.kernel_backend_blocker())
    monkeypatch.setattr(backends, "has_cap_sys_admin", lambda: True)
    monkeypatch.setattr(backends, "kernel_version", lambda: (6, 8))
    assert ">= 6.9" in str(backends.kernel_backend_blocker())


def test_kernel_version_parses_distribution_suffixes(monkeypatch: pytest.MonkeyPatch) -> None:
    class Uname:
        release = "6.18.44-fc-v669"

    monkeypatch.setattr(backends.os, "uname", lambda: Uname())
    assert backends.kernel_version() == (6, 18)
