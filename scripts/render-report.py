#!/usr/bin/env python3
"""Render the report page in headless Chromium to a PNG, 1280 px wide, full page height.

    scripts/render-report.py [results/default/report/index.html] [--out report.png] [--width 1280]

Uses Debian's ``chromium`` package (``apt-get install -y chromium``), or the
binary given with ``--chromium``. Two passes: the first loads a copy of the page
with a small script that puts the document's scroll width and height into its
title and dumps the DOM (``--dump-dom``); the second takes the screenshot at
the measured height. Prints the size and exits with status 2 when the page is
wider than the window (horizontal overflow), so the layout can be checked by
anyone, and by CI where Chromium is installed. Standard library only, plus
``adloco.core.paths`` (itself standard library only) for the default page.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from adloco.core import paths

MEASURE = """<script>
window.addEventListener('load', function () {
  var d = document.documentElement, b = document.body;
  document.title = 'MEASURE' + JSON.stringify({
    width: Math.max(d.scrollWidth, b.scrollWidth),
    height: Math.max(d.scrollHeight, b.scrollHeight)});
});
</script>"""

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium(given: str | None) -> str:
    for name in ([given] if given else []) + list(CANDIDATES):
        path = shutil.which(name) if name else None
        if path:
            return path
    sys.exit("no Chromium found: apt-get install -y chromium, or pass --chromium PATH")


def chromium(binary: str, width: int, height: int, *args: str) -> subprocess.CompletedProcess:
    command = [
        binary,
        "--headless",
        "--no-sandbox",  # root in containers
        "--disable-gpu",
        "--hide-scrollbars",
        "--no-first-run",
        "--force-device-scale-factor=1",
        f"--window-size={width},{height}",
        "--virtual-time-budget=10000",  # let every embedded image decode first
        *args,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)


def measure(binary: str, page: Path, width: int) -> dict:
    text = page.read_text(encoding="utf-8")
    probe = text.replace("</body>", MEASURE + "</body>", 1)
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "measure.html"
        copy.write_text(probe, encoding="utf-8")
        done = chromium(binary, width, 900, "--dump-dom", copy.as_uri())
    found = re.search(r"MEASURE(\{.*?\})</title>", done.stdout)
    if not found:
        sys.exit(f"could not measure the page:\n{done.stderr[-2000:]}")
    return json.loads(found.group(1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("page", nargs="?", default=str(paths.report_dir("default") / "index.html"))
    parser.add_argument("--out", default=None, help="PNG path (default: beside the page)")
    parser.add_argument("--width", type=int, default=1280, help="window width in px")
    parser.add_argument("--chromium", default=None, help="Chromium binary")
    args = parser.parse_args()

    page = Path(args.page).resolve()
    if not page.is_file():
        sys.exit(f"{page}: page not found (run `adloco report` first)")
    out = Path(args.out).resolve() if args.out else page.with_suffix(".png")
    binary = find_chromium(args.chromium)
    size = measure(binary, page, args.width)
    height = max(int(size["height"]), 100)
    done = chromium(binary, args.width, height, f"--screenshot={out}", page.as_uri())
    if not out.is_file():
        sys.exit(f"no screenshot written:\n{done.stderr[-2000:]}")
    print(f"{out}: {args.width} x {height} px; page scroll width {size['width']} px")
    if size["width"] > args.width:
        print(f"horizontal overflow: the page is {size['width']} px wide", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
