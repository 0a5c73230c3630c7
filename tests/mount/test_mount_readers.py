"""Every Reader family through a real mount, with real clients (cat, Python).

One mount per FUSE backend serves the whole module: a workspace with real
third-party files of every family plus malformed ones. Each answer is checked
against an independent computation, and after every malformed request the
mount must still serve plain reads.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import shutil
import subprocess
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparsefs.protocol.pack_text import content
from tests import mountutil
from tests.conftest import BACKENDS, DATA, _check_clean, skip_unless_available

Mount = mountutil.Mount
ERROR_PACK_BOUND_S = 10.0


def _workspace(src: Path) -> None:
    (src / "pdf").mkdir(parents=True)
    shutil.copy(DATA / "pdf" / "filings" / "PEPSICO_2023Q1_EARNINGS.pdf", src / "pdf" / "pepsico.pdf")
    (src / "tables").mkdir()
    shutil.copy(DATA / "csv" / "datasets-covid-19" / "reference.csv", src / "tables" / "reference.csv")
    shutil.copy(DATA / "csv" / "elastic-examples" / "zip_codes.csv", src / "tables" / "zip_codes.csv")
    shutil.copy(DATA / "xlsx" / "sheetcopilot" / "SummerSales.xlsx", src / "tables" / "SummerSales.xlsx")
    (src / "data").mkdir()
    shutil.copy(DATA / "json" / "octokit-fixtures" / "get-repository.raw-fixture.json", src / "data" / "repo.json")
    shutil.copy(DATA / "logs" / "elastic-examples" / "apache_logs", src / "data" / "apache_logs")
    (src / "code").mkdir()
    shutil.copy(Path(__file__).resolve().parents[2] / "readers" / "ops.py", src / "code" / "ops.py")
    (src / "web").mkdir()
    (src / "web" / "guide.html").write_text(_PAGE)
    _malformed(src / "bad")


_PAGE = """<!doctype html><html><head><title>Turbine guide</title><script>track()</script></head>
<body><nav><a href="/">Home</a> <a href="/shop">Shop</a></nav>
<div class="cookie-banner">We use cookies. Accept all?</div>
<main><h1>Turbine guide</h1><p>Wind turbines convert kinetic energy into electricity.</p>
<h2>Maintenance</h2><p>Gearboxes are inspected every 6 months; blades once a year.</p></main>
<footer>Copyright 2026 Example Corp</footer></body></html>
"""


def _malformed(bad: Path) -> None:
    bad.mkdir()
    pdf = (DATA / "pdf" / "filings" / "PEPSICO_2023Q1_EARNINGS.pdf").read_bytes()
    (bad / "truncated.pdf").write_bytes(pdf[: len(pdf) // 3])
    xlsx = (DATA / "xlsx" / "sheetcopilot" / "SummerSales.xlsx").read_bytes()
    middle = len(xlsx) // 2  # inside the compressed sheet data
    (bad / "corrupt.xlsx").write_bytes(xlsx[:middle] + b"\xff" * 300 + xlsx[middle + 300 :])
    (bad / "bomb.xlsx").write_bytes(_shared_strings_bomb())
    (bad / "invalid.json").write_text('{"a": [1, 2,, 3]}')
    with open(bad / "one-line.txt", "wb") as f:  # 1 GiB, a single line (sparse on disk)
        f.write(b"a" * 4096)
        f.truncate(1 << 30)


def _shared_strings_bomb() -> bytes:
    """A workbook whose sharedStrings.xml inflates to ~800 MB from a small zip."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("[Content_Types].xml", '<?xml version="1.0"?><Types/>')
        z.writestr("xl/workbook.xml", '<?xml version="1.0"?><workbook/>')
        with z.open("xl/sharedStrings.xml", "w", force_zip64=True) as member:
            member.write(b'<?xml version="1.0"?><sst>')
            chunk = b"<si><t>" + b"A" * 1_000_000 + b"</t></si>"
            for _ in range(800):
                member.write(chunk)
            member.write(b"</sst>")
    return out.getvalue()


@pytest.fixture(scope="module", params=BACKENDS)
def mount(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mount]:
    """One mount per backend for the whole module."""
    skip_unless_available(str(request.param))
    base = tmp_path_factory.mktemp("readers")
    src, mnt = base / "src", base / "mnt"
    src.mkdir()
    mnt.mkdir()
    _workspace(src)
    with mountutil.mounted(src, mnt, base / "state", backend=str(request.param)) as m:
        yield m
    _check_clean(m)


def cat(m: Mount, name: str) -> str:
    out = subprocess.run(["cat", name], cwd=m.mountpoint, capture_output=True, timeout=60, check=True)
    return out.stdout.decode()


def pack(m: Mount, name: str) -> dict[str, Any]:
    return dict(json.loads(cat(m, name + "&format=json")))


def still_up(m: Mount) -> None:
    assert (m.mountpoint / "code" / "ops.py").read_bytes() == (m.source / "code" / "ops.py").read_bytes()


@pytest.mark.parametrize(
    "name",
    ["bad/truncated.pdf@scout", "bad/corrupt.xlsx@scout", "bad/bomb.xlsx@scout",
     "bad/invalid.json@scout", "bad/one-line.txt@intent=anything", "bad/bomb.xlsx@sum=A"],
)
def test_malformed_input_is_a_clear_error_pack_and_the_mount_stays_up(mount: Mount, name: str) -> None:
    started = time.monotonic()
    got = pack(mount, name)
    assert time.monotonic() - started < ERROR_PACK_BOUND_S
    assert got["decision"] == "error", got
    assert got["error"]["message"] and got["error"]["hint"]
    still_up(mount)


def test_exact_sum_over_all_rows_matches_the_csv_module(mount: Mount) -> None:
    with open(mount.source / "tables" / "reference.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    values = [float(r["Population"]) for r in rows if r["Population"].strip()]
    got = pack(mount, "tables/reference.csv@sum=Population")
    assert got["decision"] == "exact"
    text = " ".join(item["text"] for item in got["evidence"])
    expected = math.fsum(values)
    assert f"{int(expected):,}" in text or f"{expected:,.15g}" in text, text
    assert got["exposure"]["pack_chars"] < 500
    assert str(len(rows)) in f"{got['scope']['units_scanned']}"


def test_folder_scout_lists_every_family(mount: Mount) -> None:
    got = pack(mount, "tables@scout")
    text = got["preview"] or got["full_view"]
    for name in ("reference.csv", "zip_codes.csv", "SummerSales.xlsx"):
        assert name in text
    still_up(mount)


def test_folder_intent_anchors_evidence_in_member_files(mount: Mount) -> None:
    got = pack(mount, "code@intent=parse the where conditions")
    assert got["evidence"] and all(e["anchor"].startswith("ops.py:") for e in got["evidence"])


def test_operation_on_a_reader_without_it_is_an_error_pack(mount: Mount) -> None:
    got = pack(mount, "code/ops.py@sum=x")
    assert got["decision"] == "error" and "sum" in got["error"]["message"]


def test_stat_size_equals_bytes_read_for_exact_results(mount: Mount) -> None:
    path = mount.mountpoint / "tables" / "reference.csv@count"
    data = path.read_bytes()
    assert os.stat(path).st_size == len(data)


def test_json_path_lookup_matches_the_json_module(mount: Mount) -> None:
    recording = json.loads((mount.source / "data" / "repo.json").read_text())
    expected = [entry["status"] for entry in recording]
    got = pack(mount, "data/repo.json@path=$[*].status")
    assert got["decision"] == "exact"
    text = "\n".join(item["text"] for item in got["evidence"])
    assert f"{len(expected)} match" in text
    for status in set(expected):
        assert f"= {status}" in text


def test_log_count_of_server_errors_matches_a_regex_count(mount: Mount) -> None:
    import re

    lines = (mount.source / "data" / "apache_logs").read_text(errors="replace").splitlines()
    status = re.compile(r'" (\d{3}) ')
    expected = sum(1 for line in lines if (m := status.search(line)) and int(m.group(1)) >= 500)
    got = pack(mount, "data/apache_logs@count&where=status>=500")
    text = " ".join(item["text"] for item in got["evidence"])
    assert got["decision"] == "exact" and f"{expected:,}" in text, text


def test_pdf_intent_is_page_anchored_and_focus_resolves_it(mount: Mount) -> None:
    import pymupdf

    got = pack(mount, "pdf/pepsico.pdf@intent=organic revenue growth")
    assert got["decision"] == "sparse" and got["evidence"]
    first = got["evidence"][0]
    page = int(first["anchor"].split(":")[0].removeprefix("p"))
    with pymupdf.open(mount.source / "pdf" / "pepsico.pdf") as doc:
        words = doc[page - 1].get_text().split()
    assert all(word in words for word in first["text"].split()[:5]), first
    focused = cat(mount, f"pdf/pepsico.pdf@focus={first['anchor']}")
    assert content(first["text"].strip()) in focused  # each line after the first begins with a space
    scout = pack(mount, "pdf/pepsico.pdf@scout")
    assert "16 pages" in (scout["preview"] or "")


def test_code_focus_on_a_symbol_returns_its_whole_definition(mount: Mount) -> None:
    import ast

    source = (mount.source / "code" / "ops.py").read_text()
    node = next(n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef) and n.name == "parse_where")
    expected = "\n".join(source.splitlines()[node.lineno - 1 : node.end_lineno])
    got = pack(mount, "code/ops.py@focus=#parse_where")
    assert got["evidence"][0]["text"].rstrip() == expected.rstrip()
    assert "parse_where" in (pack(mount, "code/ops.py@scout")["preview"] or "")


def test_html_reads_the_main_text_without_boilerplate(mount: Mount) -> None:
    full = pack(mount, "web/guide.html@full")["full_view"]
    assert "Gearboxes are inspected every 6 months" in full and "Wind turbines convert" in full
    for boilerplate in ("cookies", "Shop", "Copyright", "track()"):
        assert boilerplate not in full
    section = pack(mount, "web/guide.html@focus=#Maintenance")
    assert section["decision"] == "native-fit"  # a small page comes back whole: cheaper than the protocol
    assert "every 6 months" in section["full_view"]
