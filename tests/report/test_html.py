"""The page: self-contained, every reference resolves, claims as worked out by hand."""

from __future__ import annotations

import base64
import json
from html.parser import HTMLParser
from pathlib import Path

import pytest

from adloco.report import FIGURE_NAMES, build_report

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


class References(HTMLParser):
    """Every src/href attribute and every id of a page."""

    def __init__(self):
        super().__init__()
        self.refs: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name in ("src", "href") and value is not None:
                self.refs.append(value)
            if name == "id":
                self.ids.add(value)


def check_references(out: Path) -> int:
    """Assert each reference is an embedded PNG, an anchor of the page or an existing file."""
    parser = References()
    parser.feed((out / "index.html").read_text())
    images = 0
    for ref in parser.refs:
        if ref.startswith("data:"):
            assert ref.startswith("data:image/png;base64,")
            assert base64.b64decode(ref.split(",", 1)[1]).startswith(PNG_SIGNATURE)
            images += 1
        elif ref.startswith("#"):
            assert ref[1:] in parser.ids, ref
        else:
            assert "://" not in ref, ref
            assert (out / ref).is_file(), ref
    return images


@pytest.fixture(scope="module")
def report(tmp_path_factory, fixtures_dir):
    out = tmp_path_factory.mktemp("report")
    f = fixtures_dir
    claims = build_report(f / "config.yaml", f / "runs", f / "calibration", f / "variance", out)
    return out, claims


def test_every_reference_exists(report):
    out, _ = report
    # perplexity, batch, trainers, ablations, per-batch histograms, deviations.png
    assert check_references(out) == 6
    for name in FIGURE_NAMES:
        assert (out / "figures" / f"{name}.png").read_bytes().startswith(PNG_SIGNATURE)


def test_claims_as_worked_out_by_hand(report):
    out, claims = report
    # Target 92 (diloco's final). adloco reaches it at 4 communications and 3.25 s, diloco at
    # 4 communications and 4.0 s: claim 1 is a tie (not fewer), claim 2 holds. The no-merge
    # ablation ends at 85 > 60 and needs 6 > 4 communications. Requested batch 4 -> 32; one
    # merge in round 3; round 3 capped, round 4 accumulates.
    verdicts = [c["verdict"] for c in claims["claims"]]
    assert verdicts == ["not supported"] + ["supported"] * 5
    assert json.loads((out / "claims.json").read_text()) == claims
    page = (out / "index.html").read_text()
    assert "Claims of the paper" in page
    assert page.count("class='verdict supported'") == 5
    assert "Target perplexity: <b>92</b>" in page


def test_tables_show_calibration_and_variance(report):
    out, _ = report
    page = (out / "index.html").read_text()
    assert "<td>512 MiB</td><td>256 MiB</td><td>9</td><td>8</td>" in page
    assert "fixed in configuration" in page
    assert "B_simple" in page and "<td>150</td>" in page


def test_same_inputs_give_the_same_page(report, tmp_path, fixtures_dir):
    out, _ = report
    f = fixtures_dir
    build_report(f / "config.yaml", f / "runs", f / "calibration", f / "variance", tmp_path)
    assert (tmp_path / "index.html").read_bytes() == (out / "index.html").read_bytes()


def test_several_seeds_and_missing_optional_variance_files(workspace, tmp_path):
    ws = workspace
    ws.run(
        "diloco", {"method": "diloco"}, {0: ws.single([100, 80, 60]), 1: ws.single([100, 80, 70])}
    )
    ws.run(
        "adloco", ws.FULL_ADLOCO, {0: ws.pair([60, 50], [70, 50]), 1: ws.pair([90, 64], [95, 66])}
    )
    ws.run(
        "adloco-no-merge",
        {**ws.FULL_ADLOCO, "merge": "none"},
        {0: ws.pair([90, 80], [95, 85]), 1: ws.pair([90, 66], [95, 62])},
    )
    config = ws.write()
    out = tmp_path / "out"
    build_report(config, ws.runs_dir, ws.root / "calibration", ws.root / "variance", out)
    # No deviations.png or per_batch.csv: four figures, and the page says what is missing.
    assert check_references(out) == 4
    assert not (out / "figures" / "variance.png").exists()
    page = (out / "index.html").read_text()
    assert "Not drawn: deviations.png not found" in page
    assert "per_batch.csv not found" in page
