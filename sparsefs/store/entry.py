"""One parsed-store entry on disk: a directory of named files, no pickle (``sparsefs.store.parsed``).

    meta.json      format + code version, artifact key, sizes and xxh3 of every file
    data.json      the encoded data tree (``sparsefs.store.serial``)
    full_view.txt  the full view;  a<i>.npy  numpy arrays;  b<i>.bin  byte blobs

Written into a temp directory and renamed into place; read back only when every
file's size and hash match the meta (a big array is memory-mapped copy-on-write).
"""

from __future__ import annotations

import os
import re
import shutil
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import xxhash

from readers.base import Parsed
from sparsefs.store import serial

_MMAP_BYTES = 8 << 20  # each mmap holds a file descriptor: only for big arrays
_FILE_NAME = re.compile(r"full_view\.txt|data\.json|a[0-9]{1,6}\.npy|b[0-9]{1,6}\.bin")


def write_entry(final: Path, tmp_root: Path, parsed: Parsed, code: str, key: tuple[str, str]) -> int:
    """Write one entry atomically (temp dir + rename); returns its size in bytes."""
    encoded = serial.encode(parsed.data, {id(parsed.full_view): "full_view"})
    tmp = tmp_root / uuid.uuid4().hex
    tmp.mkdir()
    try:
        view, tree = parsed.full_view.encode("utf-8", "surrogatepass"), orjson.dumps(encoded.tree)
        files = {"full_view.txt": _put(tmp / "full_view.txt", view), "data.json": _put(tmp / "data.json", tree)}
        for i, array in enumerate(encoded.arrays):
            np.save(tmp / f"a{i}.npy", array, allow_pickle=False)
            files[f"a{i}.npy"] = (tmp / f"a{i}.npy").stat().st_size
        for i, blob in enumerate(encoded.blobs):
            files[f"b{i}.bin"] = _put(tmp / f"b{i}.bin", blob)
        hashes = {name: xxhash.xxh3_64_hexdigest((tmp / name).read_bytes()) for name in files}
        meta = {"format": serial.FORMAT, "code": code, "fingerprint": key[0], "reader": key[1], "kind": parsed.kind,
                "chars": len(parsed.full_view), "files": files, "hashes": hashes}
        size = _put(tmp / "meta.json", orjson.dumps(meta)) + sum(files.values())
        _install(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return size


def _put(path: Path, data: bytes) -> int:
    path.write_bytes(data)
    return len(data)


def _install(tmp: Path, final: Path) -> None:
    """Rename into place; an existing entry (a re-save) is swapped out first."""
    final.parent.mkdir(exist_ok=True)
    if final.exists():
        trash = tmp.with_name(tmp.name + ".old")
        os.rename(final, trash)
        shutil.rmtree(trash, ignore_errors=True)
    os.rename(tmp, final)


def read_entry(path: Path, code: str, fingerprint: str, reader: str) -> Parsed:
    """One entry, every file checked by size and xxh3; serial.Corrupt when anything is off."""
    meta = orjson.loads((path / "meta.json").read_bytes())
    expected = (serial.FORMAT, code, fingerprint, reader)
    if (meta["format"], meta["code"], meta["fingerprint"], meta["reader"]) != expected:
        raise serial.Corrupt("another format, code version or artifact")
    files: dict[str, int] = meta["files"]
    for name, size in files.items():
        if not _FILE_NAME.fullmatch(name) or (path / name).stat().st_size != size:
            raise serial.Corrupt(f"{name}: size differs")
        if not name.endswith(".txt") and not name.endswith(".json"):
            _checked(path, name, meta)  # every side file too: a PDF's bytes, an index's arrays
    view = _checked(path, "full_view.txt", meta).decode("utf-8", "surrogatepass")
    tree = orjson.loads(_checked(path, "data.json", meta))
    data = serial.decode(tree, _array_loader(path, files), _blob_loader(path, files), {"full_view": view})
    if not isinstance(data, dict) or len(view) != meta["chars"]:
        raise serial.Corrupt("data is not a dict")
    return Parsed(view, str(meta["kind"]), data)


def _checked(path: Path, name: str, meta: dict[str, Any]) -> bytes:
    data = (path / name).read_bytes()
    if xxhash.xxh3_64_hexdigest(data) != meta["hashes"][name]:
        raise serial.Corrupt(f"{name}: hash differs")
    return data


def _array_loader(path: Path, files: dict[str, int]) -> serial.Loader:
    def load(i: int) -> np.ndarray[Any, Any]:
        name = f"a{i}.npy"
        if files[name] > _MMAP_BYTES:  # copy-on-write: a Reader writing into it never touches the file
            return np.load(path / name, allow_pickle=False, mmap_mode="c")  # type: ignore[no-any-return]
        return np.load(path / name, allow_pickle=False)  # type: ignore[no-any-return]
    return load


def _blob_loader(path: Path, files: dict[str, int]) -> serial.Loader:
    def load(i: int) -> bytes:
        name = f"b{i}.bin"
        if name not in files:
            raise serial.Corrupt(f"{name} is not listed")
        return (path / name).read_bytes()
    return load
