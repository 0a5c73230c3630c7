#!/usr/bin/env python3
"""Data integrity through SparseFS: sha256 of every file, and fio-verified writes.

Two checks, each on every backend asked for (default: kernel and mfusepy):

1. ``sha256``: mirror-mount the source (default /work/shared/data, read-only
   use) and compare the sha256 of every regular file read natively with the
   same file read through the mount — once right after
   ``drop_caches`` (cold: the bytes come from disk through the backend), once
   again (warm). The listing (names, types, sizes) must match too; the mount
   root's ``.sparsefs`` control directory is left out.
2. ``fio``: in a scratch source directory, mirror-mount it and run Debian's fio
   with ``--verify=crc32c --do_verify=1 --verify_fatal=1`` through the mount:
   random writes of 4 KiB–1 MiB blocks and sequential 1 MiB writes (256 MiB
   each by default), plus a 4 KiB random-write job through mmap. Then the
   files are hashed through the mount (after drop_caches) and in the source;
   the mount is gone, caches are dropped, and fio re-verifies every job in
   ``--verify_only`` mode against the source directory itself. The same jobs
   on the native directory are the control; there, one byte of the sequential
   job's file is then flipped and the verify-only run must fail (so the check
   can fail at all).

Exits 1 on any mismatch, fio failure, or mount problem; prints a summary
(and ``--json PATH`` writes it). Needs root (mounting, drop_caches) and fio.

    .venv/bin/python scripts/bench_integrity.py
    .venv/bin/python scripts/bench_integrity.py --backends kernel --skip-fio
"""

from __future__ import annotations

import argparse
import atexit
import hashlib
import json
import os
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_fuse import (
    BENCH_ROOT,
    SPARSEFS_ARGS,
    BenchError,
    FuseMount,
    code_version,
    drop_caches,
    log,
    machine_facts,
    mountinfo,
    stop_all,
    use_snapshot,
)

DEFAULT_SOURCE = Path("/work/shared/data")
SCRATCH = Path("/tmp/sparsefs-integrity")
CONTROL = ".sparsefs"


def fio_jobs(size: str) -> dict[str, list[str]]:
    common = ["--verify=crc32c", "--do_verify=1", "--verify_fatal=1", "--randrepeat=1", "--end_fsync=1"]
    return {
        "randwrite": ["--rw=randwrite", "--bsrange=4k-1m", f"--size={size}", "--ioengine=psync", *common],
        "seqwrite": ["--rw=write", "--bs=1m", f"--size={size}", "--ioengine=psync", *common],
        "mmap": ["--rw=randwrite", "--bs=4k", "--size=64M", "--ioengine=mmap", *common],
    }


# ---------------------------------------------------------------- helpers -------
def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb", buffering=0) as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def listing(root: Path, skip_control: bool) -> dict[str, tuple[str, int]]:
    """relative path -> (type, size for regular files else 0), without following symlinks."""
    entries: dict[str, tuple[str, int]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        if skip_control and rel_dir == ".":
            dirnames[:] = [d for d in dirnames if d != CONTROL]
        for name in dirnames + filenames:
            rel = os.path.normpath(os.path.join(rel_dir, name))
            st = os.lstat(os.path.join(dirpath, name))
            kind = ("dir" if stat.S_ISDIR(st.st_mode) else "file" if stat.S_ISREG(st.st_mode)
                    else "link" if stat.S_ISLNK(st.st_mode) else "other")
            entries[rel] = (kind, st.st_size if kind == "file" else 0)
    return entries


class Mounted:
    """A SparseFS mirror mount for the duration of a with-block."""

    def __init__(self, system: str, src: Path, work: Path, tag: str) -> None:
        self.mount = FuseMount(system, src, work / f"mnt-{tag}", work / "state" / tag, work / f"{tag}.log")

    def __enter__(self) -> Path:
        self.mount.start()
        return self.mount.mnt

    def __exit__(self, *exc: object) -> None:
        self.mount.stop()


# ---------------------------------------------------------------- sha256 --------
def check_sha256(source: Path, system: str, work: Path, native: dict[str, str],
                 native_list: dict[str, tuple[str, int]]) -> dict[str, Any]:
    result: dict[str, Any] = {"system": system, "files": len(native), "mismatches": [], "listing_diff": []}
    with Mounted(system, source, work, f"sha-{system}") as mnt:
        mounted_list = listing(mnt, skip_control=True)
        for rel in sorted(set(native_list) | set(mounted_list)):
            if native_list.get(rel) != mounted_list.get(rel):
                result["listing_diff"].append(f"{rel}: native {native_list.get(rel)} mount {mounted_list.get(rel)}")
        for phase in ("cold", "warm"):
            if phase == "cold":
                drop_caches()
            start = time.perf_counter()
            for rel, want in native.items():
                try:
                    got = sha256_file(mnt / rel)
                except OSError as err:
                    got = f"error: {err}"
                if got != want:
                    result["mismatches"].append(f"{phase} {rel}: native {want} mount {got}")
            result[f"{phase}_s"] = round(time.perf_counter() - start, 3)
    log(f"sha256 {system}: {result['files']} files, {len(result['mismatches'])} mismatches, "
        f"{len(result['listing_diff'])} listing differences (cold {result['cold_s']} s, warm {result['warm_s']} s)")
    return result


# ---------------------------------------------------------------- fio -----------
def run_fio(name: str, args: list[str], directory: Path, verify_only: bool, timeout: float) -> dict[str, Any]:
    cmd = ["fio", f"--name={name}", f"--directory={directory}", *args, "--output-format=json"]
    if verify_only:
        cmd.append("--verify_only")
    start = time.perf_counter()
    # cwd: fio drops its verify-state files (local-*-verify.state) in the working directory
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False, cwd=directory.parent)
    elapsed = time.perf_counter() - start
    out: dict[str, Any] = {"cmd": shlex.join(cmd), "rc": proc.returncode, "s": round(elapsed, 2)}
    try:
        job = json.loads(proc.stdout[proc.stdout.find("{"):])["jobs"][0]
        out["error"] = job.get("error", 0)
        out["write_MBps"] = round(job["write"]["bw_bytes"] / 1e6, 1)
        out["read_MBps"] = round(job["read"]["bw_bytes"] / 1e6, 1)
        out["written_MB"] = round(job["write"]["io_bytes"] / 1e6, 1)
        out["verified_MB"] = round(job["read"]["io_bytes"] / 1e6, 1)
    except (ValueError, KeyError, IndexError):
        out["error"] = "unparsable fio output"
    if proc.returncode != 0 or out["error"]:
        out["stderr"] = (proc.stderr or proc.stdout)[-2000:]
    return out


def check_fio(system: str, work: Path, size: str, timeout: float) -> dict[str, Any]:
    src = work / f"fio-src-{system}"
    if src.exists():
        shutil.rmtree(src)
    src.mkdir(parents=True)
    result: dict[str, Any] = {"system": system, "jobs": {}, "failures": []}
    jobs = fio_jobs(size)

    def failed(what: str, out: dict[str, Any]) -> bool:
        if out["rc"] != 0 or out["error"]:
            result["failures"].append(f"{what}: rc {out['rc']} error {out['error']}: {out.get('stderr', '')[-300:]}")
            return True
        return False

    def job_files() -> list[str]:
        return sorted(p.name for p in src.iterdir())

    if system == "native":
        for name, args in jobs.items():
            out = run_fio(name, args, src, False, timeout)
            result["jobs"][name] = {"write": out}
            failed(f"{name} write+verify", out)
    else:
        with Mounted(system, src, work, f"fio-{system}") as mnt:
            for name, args in jobs.items():
                out = run_fio(name, args, mnt, False, timeout)
                result["jobs"][name] = {"write": out}
                failed(f"{name} write+verify through the mount", out)
            drop_caches()
            for file in job_files():
                via_mount, in_source = sha256_file(mnt / file), sha256_file(src / file)
                result.setdefault("sha256", {})[file] = via_mount == in_source
                if via_mount != in_source:
                    result["failures"].append(f"{file}: sha256 through the mount {via_mount} != source {in_source}")
    drop_caches()
    for name, args in jobs.items():
        out = run_fio(name, args, src, True, timeout)
        result["jobs"][name]["verify_only_on_source"] = out
        failed(f"{name} verify-only on the source directory", out)
    if system == "native":
        target = src / next(f for f in job_files() if f.startswith("seqwrite"))
        with open(target, "r+b") as fh:
            fh.seek(123_457)
            byte = fh.read(1)
            fh.seek(123_457)
            fh.write(bytes([byte[0] ^ 0xFF]))
        drop_caches()
        out = run_fio("seqwrite", jobs["seqwrite"], src, True, timeout)
        result["negative_control"] = {"rc": out["rc"], "error": out["error"]}
        if out["rc"] == 0 and not out["error"]:
            result["failures"].append("negative control: fio verify-only passed on a file with a flipped byte")
        log(f"fio native   negative control (one flipped byte): verify-only rc {out['rc']} "
            f"({'fails as it should' if out['rc'] else 'DID NOT FAIL'})")
    for name, job in result["jobs"].items():
        w, v = job["write"], job["verify_only_on_source"]
        log(f"fio {system:8s} {name:9s}: write {w.get('written_MB')} MB at {w.get('write_MBps')} MB/s, "
            f"verified {w.get('verified_MB')} MB (rc {w['rc']}); verify-only on source: "
            f"{v.get('verified_MB')} MB (rc {v['rc']})")
    shutil.rmtree(src, ignore_errors=True)
    return result


# ---------------------------------------------------------------- main ----------
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="tree to hash (never written)")
    parser.add_argument("--backends", default="kernel,mfusepy",
                        help=f"comma list of {','.join(SPARSEFS_ARGS)} (default kernel,mfusepy)")
    parser.add_argument("--fio-size", default="256M", help="size of the random and sequential fio jobs")
    parser.add_argument("--skip-fio", action="store_true")
    parser.add_argument("--skip-sha", action="store_true")
    parser.add_argument("--timeout", type=float, default=600.0, help="per fio run, seconds")
    parser.add_argument("--json", type=Path, help="write the full results here")
    parser.add_argument("--code", default="HEAD",
                        help="git revision whose sparsefs/readers/gate the mounts run (snapshot; default HEAD), "
                             "or 'worktree' for the live tree")
    args = parser.parse_args()
    systems = [s.strip() for s in args.backends.split(",") if s.strip()]
    for system in systems:
        if system not in SPARSEFS_ARGS:
            parser.error(f"unknown backend {system}")
    if os.geteuid() != 0:
        parser.error("needs root (mounting, drop_caches)")
    if not args.skip_fio and shutil.which("fio") is None:
        parser.error("fio not found (apt-get install -y fio)")

    def on_signal(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, on_signal)
    atexit.register(stop_all)

    work = SCRATCH / f"run-{os.getpid()}"
    work.mkdir(parents=True)
    report: dict[str, Any] = {
        "command": shlex.join([".venv/bin/python", "scripts/bench_integrity.py", *sys.argv[1:]]),
        "date": time.strftime("%Y-%m-%d %H:%M %Z"), "machine": machine_facts(),
        "code": code_version() if args.code == "worktree" else None,
        "fio": subprocess.run(["fio", "--version"], capture_output=True, text=True, check=False).stdout.strip()
        if not args.skip_fio else None,
        "sha256": [], "fio_runs": [],
    }
    bad = 0
    try:
        if args.code != "worktree":
            BENCH_ROOT.mkdir(parents=True, exist_ok=True)
            report["code"] = use_snapshot(args.code)
        log(f"code: {report['code']}")
        if not args.skip_sha:
            source = args.source.resolve()
            native_list = listing(source, skip_control=False)
            native = {rel: sha256_file(source / rel) for rel, (kind, _) in sorted(native_list.items())
                      if kind == "file"}
            log(f"sha256: {len(native)} files, {sum(s for k, s in native_list.values() if k == 'file') / 1e6:.1f} MB "
                f"under {source}")
            for system in systems:
                res = check_sha256(source, system, work, native, native_list)
                report["sha256"].append(res)
                bad += len(res["mismatches"]) + len(res["listing_diff"])
        if not args.skip_fio:
            for system in ["native", *systems]:
                res = check_fio(system, work, args.fio_size, args.timeout)
                report["fio_runs"].append(res)
                bad += len(res["failures"])
    except BenchError as err:
        log(f"bench_integrity: {err}")
        bad += 1
        report["error"] = str(err)
    finally:
        stop_all()
        leftovers = [p for p in mountinfo() if p.startswith(str(work))]
        if leftovers:
            log(f"WARNING: still mounted: {leftovers}")
            bad += 1
    for res in report["sha256"]:
        for line in res["mismatches"] + res["listing_diff"]:
            log(f"  MISMATCH {res['system']}: {line}")
    for res in report["fio_runs"]:
        for line in res["failures"]:
            log(f"  FIO FAILURE {res['system']}: {line}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    log("integrity: " + ("all checks passed" if not bad else f"{bad} problem(s)"))
    shutil.rmtree(work, ignore_errors=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
