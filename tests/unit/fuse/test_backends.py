"""Choosing a backend: kernel passthrough where it can run, mfusepy everywhere else."""

from __future__ import annotations

import pytest

from sparsefs.fuse import backends, features


def test_auto_picks_kernel_when_nothing_blocks_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(features, "kernel_backend_blocker", lambda: None)
    assert backends.choose("auto")[0] == "kernel"
    assert backends.choose("kernel")[0] == "kernel"
    assert backends.choose("mfusepy") == ("mfusepy", "requested with --backend mfusepy")


def test_auto_falls_back_to_mfusepy_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(features, "kernel_backend_blocker", lambda: "kernel 5.3 is older than 5.4")
    backend, reason = backends.choose("auto")
    assert backend == "mfusepy" and "5.3" in reason
    with pytest.raises(ValueError, match=r"kernel 5\.3"):
        backends.choose("kernel")


def test_without_root_the_kernel_backend_mounts_with_fusermount3(monkeypatch: pytest.MonkeyPatch) -> None:
    """No CAP_SYS_ADMIN costs passthrough, not the backend: fusermount3 mounts, the page cache serves reads."""
    monkeypatch.setattr(features, "has_cap_sys_admin", lambda: False)
    monkeypatch.setattr(features, "fusermount", lambda: "/usr/bin/fusermount3")
    assert features.kernel_backend_blocker() is None
    backend, reason = backends.choose("auto")
    assert backend == "kernel" and "fusermount3" in reason and "page cache" in reason
    assert "CAP_SYS_ADMIN" in str(features.passthrough_blocker())
    monkeypatch.setattr(features, "fusermount", lambda: None)
    assert "fusermount3" in str(features.kernel_backend_blocker())
    assert backends.choose("auto")[0] == "mfusepy"


def test_passthrough_needs_root_and_linux_6_9_the_backend_linux_5_4(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(features, "has_cap_sys_admin", lambda: True)
    monkeypatch.setattr(features, "kernel_version", lambda: (6, 8))
    assert ">= 6.9" in str(features.passthrough_blocker())
    assert features.kernel_backend_blocker() is None
    monkeypatch.setattr(features, "kernel_version", lambda: (5, 3))
    assert "5.4" in str(features.kernel_backend_blocker())


def test_options_a_backend_cannot_honour_are_refused_by_name() -> None:
    assert backends.refused_options("kernel", no_open=True) is None
    assert "--no-open" in str(backends.refused_options("mfusepy", no_open=True))
    assert backends.refused_options("mfusepy", no_open=False) is None


def test_kernel_version_parses_distribution_suffixes(monkeypatch: pytest.MonkeyPatch) -> None:
    class Uname:
        release = "6.18.44-fc-v669"

    monkeypatch.setattr(features.os, "uname", lambda: Uname())
    assert features.kernel_version() == (6, 18)
