"""Mounts made by an ordinary user: the daemon runs as nobody, without CAP_SYS_ADMIN, and mounts with fusermount3.

On this machine /dev/fuse is 0600 root (no udev to make it 0666 as standard
distributions do), so fusermount3 refuses every ordinary user. Each user mount
therefore runs in its own private mount namespace in which a 0666 device node
for FUSE is bound over /dev/fuse: nothing changes outside that namespace, and
inside it the user meets what a laptop offers. The daemon, and every client
that touches the mount, run in that namespace as nobody (``nsenter``,
``setpriv``). The daemon is this tree's code under an interpreter nobody may
execute (the venv's lives under /root, which is 0700): a system Python of the
same version with the venv's site-packages.
"""

from __future__ import annotations

import functools
import os
import shlex
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from sparsefs.fuse.mounts import FSTYPE

USER = 65534
AS_USER = ["setpriv", f"--reuid={USER}", f"--regid={USER}", "--clear-groups", "--"]
READY_TIMEOUT_S = 30.0
_BOOT = ("import runpy, site, sys; site.addsitedir(sys.argv.pop(1)); sys.argv[0] = 'sparsefs'; "
         "runpy.run_module('sparsefs', run_name='__main__')")


@functools.cache
def user_python() -> str | None:
    """An interpreter of this Python version that nobody can run (None: user mounts cannot be tested here)."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (f"/usr/bin/python{version}", os.path.realpath(sys.executable)):
        probe = subprocess.run([*AS_USER, candidate, "-c", "import sys; print(sys.version_info[:2])"],
                               capture_output=True, text=True, timeout=30, check=False, cwd="/")
        if probe.returncode == 0 and probe.stdout.strip() == str(sys.version_info[:2]):
            return candidate
    return None


def blocker() -> str | None:
    """Why user mounts cannot run here (None: they can)."""
    if os.geteuid() != 0:
        return "needs root to set up the user's namespace"
    missing = [tool for tool in ("unshare", "nsenter", "setpriv", "fusermount3") if shutil.which(tool) is None]
    if missing:
        return f"missing {', '.join(missing)}"
    return None if user_python() else "no Python of this version that nobody may run"


@dataclass
class UserMount:
    """A daemon running as nobody in its own mount namespace, and where it is mounted."""

    base: Path
    source: Path
    mountpoint: Path
    state_dir: Path
    process: subprocess.Popen[bytes]
    log: Path

    def run(self, *command: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """``command`` as nobody inside the mount's namespace, from the user's home (the base directory)."""
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.base), "LC_ALL": "C.UTF-8"}
        return subprocess.run(["nsenter", "-m", "-t", str(self.process.pid), *AS_USER, *command],
                              capture_output=True, text=True, timeout=timeout, check=check, env=env,
                              cwd=str(self.base))

    def mounted(self) -> bool:
        return _entry(self.process.pid, self.mountpoint) is not None

    def stderr(self) -> str:
        return self.log.read_text(errors="replace")


@contextmanager
def user_home() -> Iterator[Path]:
    """A directory owned by nobody that nobody can reach (pytest's tmp_path is 0700 root)."""
    base = Path(tempfile.mkdtemp(prefix="sparsefs-user-"))
    try:
        os.chmod(base, 0o755)
        os.chown(base, USER, USER)
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def start(base: Path, source: Path, *extra: str, backend: str = "kernel", code: str | None = None) -> UserMount:
    """Mount ``source`` (owned by nobody, under ``base``) at base/mnt as nobody; wait until it answers.
    ``code``: a directory whose packages the daemon imports first (a benchmark's snapshot of a commit)."""
    mountpoint, state, log, dev = base / "mnt", base / "state", base / "daemon.log", base / ".dev"
    for path in (mountpoint, state, dev):
        path.mkdir(exist_ok=True)
        os.chown(path, USER, USER)
    site = sysconfig.get_paths()["purelib"]
    python = ["env", f"PYTHONPATH={code}", str(user_python())] if code else [str(user_python())]
    daemon = [*AS_USER, *python, "-s", "-c", _BOOT, site, "mount", "-f", str(source), str(mountpoint),
              "--state-dir", str(state), "--backend", backend, *extra]
    setup = (f"mount -t tmpfs -o size=64k,mode=755 sparsefs-dev {dev} && mknod -m 666 {dev}/fuse c 10 229 && "
             f"mount --bind {dev}/fuse /dev/fuse && umount -l {dev} && exec {shlex.join(daemon)}")
    with open(log, "wb") as out:
        process = subprocess.Popen(["unshare", "-m", "--propagation", "private", "--", "sh", "-c", setup],
                                   stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True,
                                   cwd="/")
    mount = UserMount(base, source, mountpoint, state, process, log)
    if not _wait_ready(mount):
        stop(mount)
        raise RuntimeError(f"user mount not ready: {mount.stderr()}")
    return mount


def _wait_ready(mount: UserMount) -> bool:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline and mount.process.poll() is None:
        if mount.mounted():
            ready = mount.run("cat", str(mount.mountpoint / ".sparsefs" / "ready"), check=False, timeout=10)
            if ready.returncode == 0 and ready.stdout.split()[1:2] == [str(mount.process.pid)]:
                return True
        time.sleep(0.05)
    return False


def stop(mount: UserMount, deadline_s: float = 10.0) -> None:
    """Unmount as the user (fusermount3 -u), then escalate: abort the connection, kill. Never hangs."""
    if mount.process.poll() is None and mount.mounted():
        mount.run("fusermount3", "-u", str(mount.mountpoint), check=False, timeout=10)
    try:
        mount.process.wait(timeout=deadline_s)
        return
    except subprocess.TimeoutExpired:
        pass
    entry = _entry(mount.process.pid, mount.mountpoint)
    abort = Path("/sys/fs/fuse/connections", str(entry), "abort") if entry is not None else None
    if abort is not None and abort.exists():
        abort.write_text("1")
    os.killpg(mount.process.pid, signal.SIGKILL)
    mount.process.wait(timeout=5)


def _entry(pid: int, mountpoint: Path) -> int | None:
    """The connection (device minor) of a sparsefs mount at ``mountpoint`` in ``pid``'s namespace, if any."""
    try:
        lines = Path(f"/proc/{pid}/mountinfo").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        left, _, right = line.partition(" - ")
        fields = left.split()
        if fields[4] == str(mountpoint) and right.split()[0] == FSTYPE:
            return int(fields[2].split(":")[1])
    return None
