#!/usr/bin/env python3
"""Cold parse and warm locate/focus/preview of the Code and HTML Readers (medians).

Cases: readers/text.py, and generated Python (0.75 MiB), JavaScript (4.7 MiB)
and HTML pages (1 and 5 MiB, with navigation, share widgets and scripts).

    .venv/bin/python scripts/bench_code_html.py [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from readers.base import Reader, ReadIntent  # noqa: E402
from readers.code.reader import CodeReader  # noqa: E402
from readers.html.reader import HtmlReader  # noqa: E402
from readers.kit.source import MemorySource  # noqa: E402


def median_ms(fn: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def py_source(n: int) -> str:
    return "".join(
        f'class W{i}(Base):\n    """Widget {i}."""\n\n    def method_{i}(self, x: int = {i}) -> str:\n'
        f'        s = "{{ not a block"  # }}\n        return s + str(x * {i})\n\n'
        for i in range(n)
    )


def js_source(n: int) -> str:
    return "".join(
        f'// helper {i} {{\nexport function helper{i}(a, b) {{\n  const s = "}} {{";\n  return a + b + {i};\n}}\n\n'
        for i in range(n)
    )


def page(n: int) -> str:
    nav = "<nav>" + "".join(f'<a href="/p{i}">Page {i}</a>' for i in range(50)) + "</nav>"
    body = "".join(
        f"<h2>Section {i}</h2><p>Paragraph {i} is about topic {i % 97} with <a href=/x{i}>a link</a>.</p>"
        f"<div class=share>Share</div>"
        for i in range(n)
    )
    head = "<head><title>T</title><script>var a=1;</script></head>"
    return f"<!doctype html><html>{head}<body>{nav}<main>{body}</main></body></html>"


def bench(family: str, reader: Reader, name: str, data: bytes, intent: str, runs: int) -> None:
    source = MemorySource(name, data)
    cold = median_ms(lambda: reader.parse(source), max(3, runs // 2) if len(data) > 2e6 else runs)
    parsed = reader.parse(source)
    ask = ReadIntent(intent, (intent,))
    warm = median_ms(lambda: reader.locate(parsed, ask, 1500), runs)
    label = reader.locate(parsed, ask, 1500).items[0].anchor.label
    focus = median_ms(lambda: reader.focus(parsed, label), runs)
    preview = median_ms(lambda: reader.preview(parsed, 2000), runs)
    mib = len(data) / 2**20
    print(f"{family:5} {name:16} {mib:6.2f} MiB  parse {cold:8.1f} ms ({cold / mib:6.0f} ms/MiB)  "
          f"locate {warm:6.1f} ms  focus {focus:5.1f} ms  preview {preview:5.1f} ms  "
          f"view/bytes {len(parsed.full_view) / len(data):.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    code, html = CodeReader(), HtmlReader()
    bench("code", code, "readers_text.py", (ROOT / "readers" / "text.py").read_bytes(), "heading above line", runs)
    bench("code", code, "gen_1mb.py", py_source(5000).encode(), "method_4321", runs)
    bench("code", code, "gen_5mb.js", js_source(50000).encode(), "helper31337", runs)
    bench("html", html, "gen_1mb.html", page(9000).encode(), "topic 42 paragraph", runs)
    bench("html", html, "gen_5mb.html", page(45000).encode(), "topic 42 paragraph", runs)


if __name__ == "__main__":
    main()
