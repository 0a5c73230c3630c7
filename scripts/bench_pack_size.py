"""Pack sizes on the demo workspace: what the escaping of issue 24 costs an ordinary pack.

Copies the bundled demo workspace (plus one CSV, one JSON and one PDF from the shared data when present)
to a temporary directory, reads a fixed list of requests through the Python API (the same Core a mount
uses) with a fresh state directory, and prints each pack's size in characters and the median. Run it at
two commits and compare::

    .venv/bin/python scripts/bench_pack_size.py            # this tree
    .venv/bin/python scripts/bench_pack_size.py --json     # one JSON line per pack

Pure counting: the numbers do not depend on the machine's load.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from importlib import resources
from pathlib import Path

from sparsefs import Workspace

DATA = Path("/work/shared/data")
EXTRA = {
    "covid.csv": DATA / "csv/datasets-covid-19/key-countries-pivoted.csv",
    "fixture.json": DATA / "json/octokit-fixtures/get-content.raw-fixture.json",
}
REQUESTS = [
    "annual-report.md@intent=R&D expenses 2023; headcount at year end",
    "annual-report.md@intent=revenue growth outlook 2024",
    "annual-report.md@intent=risk factors supply chain",
    "annual-report.md@intent=who is the chief executive",
    "annual-report.md@refine=sustainability emissions",
    "annual-report.md@verify=R&D expenses were $48.2 million in 2023",
    "annual-report.md@scout",
    "annual-report.md@focus=L85-91",
    "annual-report.md@collect=Harbor; Courier; Lantern",
    "notes.txt@intent=meeting",
    "src/forecast.py@scout",
    "src/forecast.py@intent=midpoint of a guidance range",
    "src@scout",
    "src@intent=forecast revenue growth",
    "README.md@scout",
    "covid.csv@scout",
    "covid.csv@sum=Italy",
    "covid.csv@intent=cases in Italy in April 2020",
    "fixture.json@scout",
    "fixture.json@intent=content of the README file",
]


def workspace(tmp: Path) -> Path:
    """The demo workspace, plus the shared-data files this machine has."""
    target = tmp / "ws"
    with resources.as_file(resources.files("sparsefs").joinpath("demo")) as path:
        shutil.copytree(path, target)
    for name, source in EXTRA.items():
        if source.exists():
            shutil.copyfile(source, target / name)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="one JSON line per pack")
    parser.add_argument("--dump", type=Path, metavar="DIR", help="also write each pack's text to DIR/NN.txt")
    args = parser.parse_args(argv)
    sizes: list[int] = []
    with tempfile.TemporaryDirectory(prefix="sparsefs-packsize-") as tmp:
        root = workspace(Path(tmp))
        with Workspace(root, state_dir=Path(tmp) / "state") as ws:
            for request in REQUESTS:
                base = request.partition("@")[0]
                if base != "." and not (root / base).exists():
                    continue
                try:
                    text = ws.read(request).text
                except Exception as err:  # noqa: BLE001 - a request this tree cannot serve is reported, not fatal
                    print(f"{request}: {type(err).__name__}: {err}", file=sys.stderr)
                    continue
                sizes.append(len(text))
                if args.dump is not None:
                    args.dump.mkdir(parents=True, exist_ok=True)
                    (args.dump / f"{len(sizes):02d}.txt").write_text(f"{request}\n{text}")
                line = {"request": request, "chars": len(text)}
                print(json.dumps(line) if args.json else f"{len(text):>7,}  {request}")
    if sizes:
        print(f"median {statistics.median(sizes):,.1f} chars over {len(sizes)} packs; total {sum(sizes):,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
