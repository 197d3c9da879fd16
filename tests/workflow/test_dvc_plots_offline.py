"""`dvc plots show` writes a page that draws its charts with the network off.

DVC's own page loads vega, vega-lite and vega-embed from a CDN, so offline
(a cluster's compute node, a laptop on a train) it is blank. `.dvc/config`
names `workflow/plots/offline.html` as the page template
(`plots.html_template`): the three libraries inlined
(scripts/vendor-plots-template.py). Here `dvc plots show` runs in a fresh
repository set up as this one, and headless Chromium, its network blocked
(every request sent to a proxy on a port where nothing listens), opens the
page: the chart must be drawn, a vega canvas in the DOM and coloured pixels in
a screenshot, where the page written with DVC's own template, opened the same
way, draws nothing (which shows that the network is indeed off).

Chromium is the browser the project renders pages with (scripts/render-report.py);
where it is not installed the drawing cannot be checked, and the tests that
need it are skipped saying so (`apt-get install -y chromium`).
"""

from __future__ import annotations

import configparser
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
pytestmark = pytest.mark.workflow_cli  # dvc plots show in a fresh repository
TEMPLATE = ROOT / "workflow/plots/offline.html"
CHROMIUM = next(
    (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)),
    None,
)
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None,
    reason="no Chromium to open the page with (apt-get install -y chromium)",
)
ENV = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
       "DVC_NO_ANALYTICS": "1"}  # fmt: skip
WIDTH, HEIGHT = 800, 600


def html_template_setting() -> str:
    config = configparser.ConfigParser()
    config.read(ROOT / ".dvc/config")
    return config["plots"]["html_template"]


def plots_page(tmp_path: Path, offline_template: bool) -> Path:
    """`dvc plots show`'s page for a four-point curve, in a repository set up as this one."""
    repo = tmp_path / ("offline" if offline_template else "dvc-default")
    repo.mkdir()
    run = dict(cwd=repo, env=ENV, check=True, capture_output=True, timeout=120)
    subprocess.run(["git", "init", "-q"], **run)
    subprocess.run([str(BIN / "dvc"), "init", "-q"], **run)
    if offline_template:
        setting = html_template_setting()
        # The same path, relative to .dvc/ as DVC reads it, to a copy of the template.
        copy = (repo / ".dvc" / setting).resolve()
        assert (ROOT / ".dvc" / setting).resolve() == TEMPLATE
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(TEMPLATE, copy)
        with open(repo / ".dvc/config", "a") as config:
            config.write(f"[plots]\n    html_template = {setting}\n")
    (repo / "curve.csv").write_text("step,loss\n0,5\n1,3\n2,2.5\n3,1\n")
    (repo / "dvc.yaml").write_text("plots:\n  - curve.csv:\n      x: step\n      y: loss\n")
    subprocess.run([str(BIN / "dvc"), "plots", "show", "-o", "page"], **run)
    return repo / "page/index.html"


def open_offline(page: Path, *args: str) -> subprocess.CompletedProcess:
    command = [
        CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
        "--no-first-run", "--force-device-scale-factor=1", f"--window-size={WIDTH},{HEIGHT}",
        # Every request goes to a proxy where nothing listens: no network.
        "--proxy-server=127.0.0.1:9", "--proxy-bypass-list=<-loopback>",
        "--virtual-time-budget=10000", *args, page.as_uri(),
    ]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)


def drawn_canvases(page: Path) -> list[tuple[int, int]]:
    """(width, height) of each canvas vega drew its marks on."""
    dom = open_offline(page, "--dump-dom").stdout
    tags = re.findall(r"<canvas[^>]*class=\"marks\"[^>]*>", dom)
    size = lambda tag, key: int(re.search(rf'{key}="(\d+)"', tag).group(1))  # noqa: E731
    return [(size(tag, "width"), size(tag, "height")) for tag in tags]


def coloured_pixels(page: Path, tmp_path: Path) -> int:
    """Pixels of a screenshot that are not grey (the chart's line is coloured)."""
    from PIL import Image

    shot = tmp_path / f"{page.parent.parent.name}.png"
    open_offline(page, f"--screenshot={shot}")
    rgb = np.asarray(Image.open(shot).convert("RGB"), dtype=int)
    return int((rgb.max(axis=2) - rgb.min(axis=2) > 40).sum())


def test_the_template_inlines_the_libraries_and_loads_nothing_from_outside():
    page = TEMPLATE.read_text()
    assert "{plot_divs}" in page
    # No `{scripts}`: DVC puts its CDN tags there.
    assert "{scripts}" not in page
    assert not re.search(r"<script[^>]*\bsrc=", page)
    stated = re.findall(r"^    (vega(?:-lite|-embed)?)@(\S+)$", page, flags=re.M)
    assert [name for name, _ in stated] == ["vega", "vega-lite", "vega-embed"]
    for name, version in stated:
        # Each inlined build is the version the header states: its own version string.
        start = page.index(f"<script>/* {name}@{version} */")
        script = page[start : page.index("</script>", start)]
        assert f'"{version}"' in script, (name, version)
    licenses = (ROOT / "workflow/plots/LICENSES.txt").read_text()
    assert [f"{n}@{v}" for n, v in stated] == re.findall(r"^(\S+@\S+) \(", licenses, flags=re.M)


@needs_chromium
def test_dvc_plots_show_page_draws_its_chart_offline(tmp_path):
    page = plots_page(tmp_path, offline_template=True)
    canvases = drawn_canvases(page)
    assert len(canvases) == 1 and min(canvases[0]) > 100, canvases
    assert coloured_pixels(page, tmp_path) > 200


@needs_chromium
def test_dvc_own_page_is_blank_offline(tmp_path):
    # The check above can fail: DVC's page, whose scripts are on the CDN, draws nothing.
    page = plots_page(tmp_path, offline_template=False)
    assert "cdn.jsdelivr.net" in page.read_text()
    assert drawn_canvases(page) == []
    assert coloured_pixels(page, tmp_path) == 0
