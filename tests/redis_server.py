"""A real redis-server (the Debian package scripts/setup installs) on a loopback port, always stopped.

Used by the shared-cache tests and scripts/bench_shared_cache.py: each server
is its own child process (never daemonized, so its pid is ours to signal), with
no persistence, in its own directory, listening on 127.0.0.1 only.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

READY_TIMEOUT_S = 10.0


def free_port(below: int = 65_536) -> int:
    """A loopback TCP port nobody listens on now (under ``below``: a cluster node's bus is its port + 10000)."""
    for _ in range(200):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
        if port < below:
            return port
    raise RuntimeError(f"no free loopback port under {below}")


@dataclass
class RedisServer:
    """One redis-server child; ``url`` for ``--cache``."""

    directory: Path
    port: int = field(default_factory=free_port)
    extra: tuple[str, ...] = ()
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        """Start it and wait until it answers PING; RuntimeError when it does not."""
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed: run scripts/setup (apt-get install redis-server)")
        self.directory.mkdir(parents=True, exist_ok=True)
        command = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                   "--dir", str(self.directory), "--protected-mode", "yes", "--daemonize", "no", *self.extra]
        log = open(self.directory / "redis.log", "wb")  # noqa: SIM115 - the child keeps it
        with log:
            self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                            start_new_session=True)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            if self.ping():
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"redis-server did not start: {(self.directory / 'redis.log').read_text()[-2000:]}")

    def client(self) -> Any:
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=2, socket_connect_timeout=2)

    def ping(self) -> bool:
        import redis

        try:
            return bool(redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=0.5,
                                    socket_connect_timeout=0.5).ping())
        except redis.RedisError:
            return False

    def kill(self) -> None:
        """SIGKILL, as a crashed or unplugged store: no goodbye to clients."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 5 s; reaped either way."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill()


@contextlib.contextmanager
def running(directory: Path, *extra: str) -> Iterator[RedisServer]:
    """A started server, stopped whatever happens."""
    server = RedisServer(directory, extra=extra)
    try:
        yield server.start()
    finally:
        server.stop()


@contextlib.contextmanager
def blackhole() -> Iterator[str]:
    """A loopback port that accepts connections and never answers: a store that hangs. Yields its URL."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    try:
        yield f"redis://127.0.0.1:{listener.getsockname()[1]}/0"
    finally:
        listener.close()


@contextlib.contextmanager
def cluster(directory: Path, nodes: int = 3) -> Iterator[str]:
    """A Redis Cluster of ``nodes`` masters on loopback (redis-cli --cluster create), stopped whatever happens.
    Yields its ``redis+cluster://`` URL."""
    servers = [RedisServer(directory / f"node{i}", port=free_port(below=55_535),  # + 10000: the cluster bus
                           extra=("--cluster-enabled", "yes", "--cluster-config-file",
                                  str(directory / f"node{i}" / "nodes.conf")))
               for i in range(nodes)]
    try:
        for server in servers:
            server.start()
        addresses = [f"127.0.0.1:{server.port}" for server in servers]
        subprocess.run(["redis-cli", "--cluster", "create", *addresses, "--cluster-replicas", "0", "--cluster-yes"],
                       check=True, capture_output=True, timeout=60)
        _wait_cluster_ok(servers[0])
        yield f"redis+cluster://{addresses[0]}/0"
    finally:
        for server in servers:
            server.stop()


def _wait_cluster_ok(server: RedisServer) -> None:
    """Until the cluster has agreed on its slots (a moment after create)."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        info = server.client().execute_command("CLUSTER", "INFO")
        if b"cluster_state:ok" in (info if isinstance(info, bytes) else str(info).encode()):
            return
        time.sleep(0.1)
    raise RuntimeError("the Redis Cluster did not reach cluster_state:ok")
