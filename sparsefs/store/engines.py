"""The engines a shared tier runs on: Redis/Valkey (redis-py) and any fsspec filesystem.

Each engine stores the parts of one artifact (``sparsefs.store.blob``) under one
artifact key and knows four things: list the part ids of a key, get some of them,
put parts write-once (a part id that exists is never overwritten), and discard
parts found bad. Nothing here waits without a bound of its own where the
library offers one; the tier (``sparsefs.store.shared``) bounds every wait again.

* **Redis / Valkey** (``redis://``, ``rediss://``, ``valkey://``, ``valkeys://``,
  ``redis+unix:///path.sock``; ``redis+cluster://`` / ``rediss+cluster://`` for
  Redis Cluster): an artifact is one hash, ``<prefix>:b<format>:<code>:<name>.<reader>``,
  its fields the part ids. One key per artifact means one cluster slot, so a
  listing (HKEYS) and a fetch (HMGET) are one round trip each; write-once is
  HSETNX; ``maxmemory`` with an ``allkeys-lru`` policy evicts whole artifacts.
* **fsspec** (``file:///shared/cache``, a plain absolute path, ``s3://bucket/prefix``
  with s3fs, any other registered protocol): an artifact is a directory
  ``<root>/b<format>/<code>/<name[:2]>/<name>.<reader>/`` with one object per part.
  On a local or network-mounted POSIX path a part is written to a temporary name
  and renamed (atomic); on an object store a PUT is atomic by itself.

The URL's own query options ``timeout`` (seconds a read waits for the store,
default 2), ``write=0`` (fetch only: never upload) and ``prefix`` (Redis key
prefix, default ``sparsefs``) are taken out; the rest go to redis-py or the
fsspec filesystem (``?endpoint_url=...`` for an S3-compatible store).
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from sparsefs.store import blob

DEFAULT_TIMEOUT_S = 2.0
UPLOAD_TIMEOUT_S = 30.0  # an upload runs off the request path; a big part over a slow link needs time
_REDIS_SCHEMES = {"redis": "redis", "rediss": "rediss", "valkey": "redis", "valkeys": "rediss",
                  "redis+cluster": "redis", "rediss+cluster": "rediss", "redis+unix": "unix"}
_SECRET_WORDS = ("pass", "secret", "token", "key", "credential")
INSTALL = {"redis": "pip install 'sparsefs[redis]'", "fsspec": "pip install 'sparsefs[fsspec]'",
           "s3": "pip install 'sparsefs[s3]'"}


class EngineUnavailable(ValueError):
    """The URL names no engine this install can run (an unknown scheme, a missing extra); says how to fix it."""


@dataclass(frozen=True)
class CacheURL:
    """A parsed ``--cache`` URL: where, how long a read waits, whether to upload, engine options."""

    url: str  # without SparseFS's own options
    scheme: str
    timeout: float = DEFAULT_TIMEOUT_S
    write: bool = True
    prefix: str = "sparsefs"
    options: dict[str, str] = field(default_factory=dict)

    @property
    def engine(self) -> str:
        return "redis" if self.scheme in _REDIS_SCHEMES else "fsspec"

    @property
    def shown(self) -> str:
        """The URL with any password or secret-looking option hidden: safe for logs and stats.json."""
        return redact(self.url)


def parse_url(text: str) -> CacheURL:
    """Split SparseFS's options off a cache URL; a plain absolute path is a local fsspec store."""
    if text.startswith("/"):
        text = "file://" + text
    parts = urlsplit(text)
    if not parts.scheme:
        raise EngineUnavailable(f"cache URL {text!r}: give a scheme (redis://host:6379/0, file:///path, s3://bucket)")
    ours: dict[str, str] = {}
    rest: list[tuple[str, str]] = []
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key in ("timeout", "write", "prefix"):
            ours[key] = value
        else:
            rest.append((key, value))
    try:
        timeout = float(ours.get("timeout", DEFAULT_TIMEOUT_S))
    except ValueError:
        raise EngineUnavailable(f"cache URL: timeout={ours['timeout']!r} is not a number of seconds") from None
    if not 0 < timeout <= 60:
        raise EngineUnavailable("cache URL: timeout must be between 0 and 60 seconds")
    url = urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(rest), parts.fragment))
    return CacheURL(url, parts.scheme.lower(), timeout, ours.get("write", "1") not in ("0", "false", "no"),
                    ours.get("prefix", "sparsefs") or "sparsefs", dict(rest))


def redact(url: str) -> str:
    """``url`` with its password and secret-looking query values replaced by ``***``."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        user, _, host = netloc.rpartition("@")
        netloc = f"{user.partition(':')[0]}:***@{host}" if ":" in user else f"{user}@{host}"
    query = [(k, "***" if any(w in k.lower() for w in _SECRET_WORDS) else v) for k, v in parse_qsl(parts.query)]
    return urlunsplit((parts.scheme, netloc, parts.path, urlencode(query, safe="*"), ""))


class Engine(Protocol):
    """What the shared tier asks of a store."""

    def part_ids(self, owner: blob.Owner) -> list[str]: ...
    def get(self, owner: blob.Owner, ids: list[str]) -> dict[str, bytes]: ...
    def put(self, owner: blob.Owner, parts: list[tuple[str, bytes]]) -> int: ...
    def discard(self, owner: blob.Owner, ids: list[str]) -> None: ...
    def probe(self) -> list[str]: ...
    def close(self) -> None: ...


def open_engine(config: CacheURL) -> Engine:
    """The engine for ``config`` (no connection is made yet); EngineUnavailable without its extra."""
    if config.engine == "redis":
        try:
            import redis  # noqa: F401 - checked here so a missing extra is a clear error at start
        except ImportError:
            raise EngineUnavailable(f"{config.shown} needs redis-py: {INSTALL['redis']}") from None
        return RedisEngine(config)
    try:
        import fsspec
    except ImportError:
        raise EngineUnavailable(f"{config.shown} needs fsspec: {INSTALL['fsspec']}") from None
    try:
        fsspec.get_filesystem_class(config.scheme)
    except (ImportError, ValueError) as err:
        hint = INSTALL["s3"] if config.scheme in ("s3", "s3a") else "install the fsspec implementation for it"
        raise EngineUnavailable(f"{config.shown}: no filesystem for {config.scheme!r} ({err}); {hint}") from None
    return FsspecEngine(config)


class RedisEngine:
    """One hash per artifact on Redis, Valkey or Redis Cluster; clients are made on first use."""

    def __init__(self, config: CacheURL) -> None:
        self.config = config
        self.cluster = config.scheme.endswith("+cluster")
        self._url = urlunsplit((_REDIS_SCHEMES[config.scheme], *urlsplit(config.url)[1:]))
        self._clients: dict[str, Any] = {}
        self._lock = threading.Lock()

    def _client(self, purpose: str) -> Any:
        """A client whose socket timeouts are the read bound ("read") or the upload bound ("write")."""
        with self._lock:
            client = self._clients.get(purpose)
            if client is None:
                client = self._clients[purpose] = self._connect(
                    self.config.timeout if purpose == "read" else max(self.config.timeout, UPLOAD_TIMEOUT_S))
            return client

    def _connect(self, timeout: float) -> Any:
        """A client that never retries by itself (the tier decides when to ask again) and never waits longer
        than ``timeout`` on a socket."""
        from redis import Redis
        from redis.backoff import NoBackoff
        from redis.cluster import RedisCluster
        from redis.retry import Retry

        kwargs: dict[str, Any] = {"socket_timeout": timeout, "socket_connect_timeout": timeout,
                                  "retry": Retry(NoBackoff(), 0)}  # the tier decides when to try again
        if self.cluster:
            return RedisCluster.from_url(self._url, **kwargs)
        return Redis.from_url(self._url, health_check_interval=0, **kwargs)

    def key(self, owner: blob.Owner) -> str:
        return f"{self.config.prefix}:b{blob.FORMAT}:{owner.code}:{owner.name}.{owner.reader}"

    def part_ids(self, owner: blob.Owner) -> list[str]:
        return [bytes(f).decode("ascii", "replace") for f in self._client("read").hkeys(self.key(owner))]

    def get(self, owner: blob.Owner, ids: list[str]) -> dict[str, bytes]:
        values = self._client("read").hmget(self.key(owner), ids)
        return {pid: bytes(v) for pid, v in zip(ids, values, strict=True) if v is not None}

    def put(self, owner: blob.Owner, parts: list[tuple[str, bytes]]) -> int:
        """HSETNX each part in order, one round trip; how many were new."""
        pipe = self._client("write").pipeline(transaction=False)
        for pid, data in parts:
            pipe.hsetnx(self.key(owner), pid, data)
        return sum(bool(r) for r in pipe.execute())

    def discard(self, owner: blob.Owner, ids: list[str]) -> None:
        self._client("write").hdel(self.key(owner), *ids)

    def probe(self) -> list[str]:
        """Ping, write, read and remove a probe; the server's version and eviction policy (doctor)."""
        client = self._client("read")
        client.ping()
        key = f"{self.config.prefix}:probe:{uuid.uuid4().hex}"
        writer = self._client("write")
        if self.config.write:
            writer.hset(key, "p", b"ok")
            if client.hget(key, "p") != b"ok":
                raise OSError("a probe written was not read back")
            writer.delete(key)
        info, memory = _one_node(client.info("server")), _one_node(client.info("memory"))
        return [f"{info.get('redis_version', '?')} server, maxmemory {memory.get('maxmemory', '?')}, "
                f"policy {memory.get('maxmemory_policy', '?')}", str(memory.get("maxmemory_policy", ""))]

    def close(self) -> None:
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            client.close()


def _one_node(info: dict[str, Any]) -> dict[str, Any]:
    """A cluster answers INFO per node ({node: info}): the first node's; a single server's as is."""
    if "redis_version" in info or "maxmemory" in info or not info:
        return info
    first = next(iter(info.values()))
    return first if isinstance(first, dict) else info


class FsspecEngine:
    """One directory of part objects per artifact on any fsspec filesystem."""

    def __init__(self, config: CacheURL) -> None:
        from fsspec.core import url_to_fs

        self.config = config
        self.fs, root = url_to_fs(config.url, **config.options)
        self.root = root.rstrip("/")
        protocols = self.fs.protocol if isinstance(self.fs.protocol, tuple) else (self.fs.protocol,)
        self.local = "file" in protocols  # POSIX: write a temp name, then rename

    def directory(self, owner: blob.Owner) -> str:
        return f"{self.root}/b{blob.FORMAT}/{owner.code}/{owner.name[:2]}/{owner.name}.{owner.reader}"

    def part_ids(self, owner: blob.Owner) -> list[str]:
        try:
            names = self.fs.ls(self.directory(owner), detail=False, refresh=True)
        except FileNotFoundError:
            return []
        return [os.path.basename(str(n).rstrip("/")) for n in names if ".tmp-" not in str(n)]

    def get(self, owner: blob.Owner, ids: list[str]) -> dict[str, bytes]:
        """The parts that exist, fetched concurrently where the filesystem is async (s3fs); a part removed since
        the listing is just absent, any other failure is the engine's."""
        base = self.directory(owner)
        found = self.fs.cat([f"{base}/{pid}" for pid in ids], on_error="return")
        out: dict[str, bytes] = {}
        for pid in ids:
            value = found.get(f"{base}/{pid}")
            if isinstance(value, FileNotFoundError):
                continue
            if isinstance(value, BaseException):
                raise value
            if value is not None:
                out[pid] = bytes(value)
        return out

    def put(self, owner: blob.Owner, parts: list[tuple[str, bytes]]) -> int:
        """Write each part that is not there yet, in order; how many were new."""
        base = self.directory(owner)
        if self.local:
            self.fs.makedirs(base, exist_ok=True)
        written = 0
        for pid, data in parts:
            path = f"{base}/{pid}"
            if self.fs.exists(path):
                continue
            if self.local:
                temp = f"{base}/.tmp-{uuid.uuid4().hex}"
                self.fs.pipe_file(temp, data)
                os.replace(temp, path)  # atomic; a racing writer of the same id wrote an equivalent part
            else:
                self.fs.pipe_file(path, data)
            written += 1
        return written

    def discard(self, owner: blob.Owner, ids: list[str]) -> None:
        """Remove parts found bad, so the next upload can write them again (write-once keeps what exists)."""
        base = self.directory(owner)
        for pid in ids:
            try:
                self.fs.rm_file(f"{base}/{pid}")
            except FileNotFoundError:
                continue

    def probe(self) -> list[str]:
        """List the root, write, read and remove a probe object (doctor)."""
        if self.local:
            self.fs.makedirs(self.root, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):  # an object store's empty prefix is no directory yet
            self.fs.ls(self.root, detail=False)
        if self.config.write:
            path = f"{self.root}/.sparsefs-probe-{uuid.uuid4().hex}"
            self.fs.pipe_file(path, b"ok")
            if self.fs.cat_file(path) != b"ok":
                raise OSError("a probe written was not read back")
            self.fs.rm_file(path)
        return [f"{type(self.fs).__name__} at {self.root}", ""]

    def close(self) -> None:
        return None


def classify(err: BaseException) -> str:
    """What a failure means for the tier: unreachable, slow, full, refused or error (counted under that name)."""
    kind = getattr(err, "sparsefs_kind", None) or _redis_kind(err)  # sparsefs.store.shared.Paused names its own
    if kind is not None:
        return str(kind)
    if isinstance(err, TimeoutError):
        return "slow"
    if isinstance(err, PermissionError) or (isinstance(err, OSError) and err.errno == errno.EROFS):
        return "refused"
    if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
        return "full"
    if isinstance(err, (ConnectionError, OSError)):
        return "unreachable"
    return "error"


def _redis_kind(err: BaseException) -> str | None:
    """redis-py's exceptions by meaning (None: not one of them, or redis-py is not installed)."""
    try:
        from redis import exceptions as rx
    except ImportError:
        return None
    if isinstance(err, (rx.AuthenticationError, rx.AuthorizationError, rx.NoPermissionError, rx.ReadOnlyError)):
        return "refused"
    if isinstance(err, rx.OutOfMemoryError) or (isinstance(err, rx.ResponseError) and str(err).startswith("OOM")):
        return "full"
    if isinstance(err, rx.TimeoutError):
        return "slow"
    if isinstance(err, (rx.ConnectionError, rx.ClusterError)):
        return "unreachable"
    if isinstance(err, rx.ResponseError) and str(err).startswith(("NOAUTH", "WRONGPASS", "NOPERM")):
        return "refused"
    return None
