"""The page without a browser: sections, table widths within 1280 px, captions, embedded images.

scripts/render-report.py renders the same page in headless Chromium; these
checks keep its layout honest where no browser is installed
(tests/report/layout.py estimates each table's narrowest possible width).
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pytest
from layout import min_table_widths, parse
from results_folder import report_request

from adloco.report import FIGURE_NAMES, build_report
from adloco.report.figures.drawing import not_drawn_png
from adloco.report.page.render import PAGE_WIDTH_PX

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SECTIONS = ("answer", "claims", "workers", "seeds", "rules", "targets", "ladder", "regimes", "runs",
            "noise", "tuning", "mechanisms", "variance", "calibration", "method")  # fmt: skip
MAX_COLUMNS = 12
# A device and two networks brought from elsewhere, so their tables are laid out too.
BROUGHT_ROOFLINES = ["fast=0.001,8"]
BROUGHT_NETWORKS = ["ib=100,0.000005", "wan=0.1,0.02"]


@pytest.fixture(scope="module")
def report(tmp_path_factory, engine_fixture, references_and_base):
    out = tmp_path_factory.mktemp("report")
    data, base = references_and_base(tmp_path_factory.mktemp("inputs"))
    f = engine_fixture
    brought = {"rooflines": BROUGHT_ROOFLINES, "networks": BROUGHT_NETWORKS}
    doc = build_report(report_request(f, out, data=data, base=base, **brought))
    return out, doc, (out / "index.html").read_text()


def check_references(out: Path, page: str) -> int:
    """Each src/href is an embedded PNG or an anchor of the page; return the image count."""
    parsed = parse(page)
    images = 0
    for ref in re.findall(r"(?:src|href)='([^']*)'", page):
        if ref.startswith("data:"):
            assert ref.startswith("data:image/png;base64,")
            assert base64.b64decode(ref.split(",", 1)[1]).startswith(PNG_SIGNATURE)
            images += 1
        else:
            assert ref.startswith("#") and ref[1:] in parsed.ids, ref
    return images


@pytest.mark.heavy
def test_sections_and_embedded_figures(report):
    out, _, page = report
    ids = parse(page).ids
    for section in SECTIONS:
        assert section in ids, section
    # Every figure of the engine fixture is drawn but the workers map (it has one split of
    # the global batch); no deviations.png in its variance folder.
    assert check_references(out, page) == len(FIGURE_NAMES) - 2  # no per_batch.csv either
    assert "No map: " in page
    for name in FIGURE_NAMES:
        path = out / "figures" / f"{name}.png"
        if name in ("variance", "workers_map"):
            # Written all the same (dvc.yaml names every figure's file): the placeholder.
            assert path.read_bytes() == not_drawn_png(name)
        else:
            assert path.read_bytes().startswith(PNG_SIGNATURE)
            assert path.read_bytes() != not_drawn_png(name)


def test_tables_fit_1280_px(report):
    *_, page = report
    widths = min_table_widths(page)
    assert len(widths) >= 10
    for index, width, columns in widths:
        assert columns <= MAX_COLUMNS, (index, columns)
        assert width <= PAGE_WIDTH_PX, (index, width)


def test_no_fixed_width_over_1280_px(report):
    *_, page = report
    styles = " ".join(parse(page).styles)
    for value in re.findall(r"(\d+(?:\.\d+)?)px", styles):
        assert float(value) <= 1280
    assert not re.search(r"\bwidth=['\"]?\d", page)  # no width attributes
    assert f"max-width: {PAGE_WIDTH_PX}px" in styles and PAGE_WIDTH_PX + 2 * 16 <= 1280


def test_every_figure_has_a_one_line_caption(report):
    *_, page = report
    figures = re.findall(r"<figure>(.*?)</figure>", page, flags=re.S)
    assert len(figures) == len(FIGURE_NAMES) - 2  # no variance, no workers map
    for fig in figures:
        (caption,) = re.findall(r"<figcaption>(.*?)</figcaption>", fig, flags=re.S)
        assert "\n" not in caption and 40 < len(caption) < 260


def test_variance_names_quantities_in_words_with_units(report):
    *_, page = report
    section = page[page.index("id='variance'") : page.index("id='calibration'")]
    assert "<th>quantity</th><th class='n'>value</th><th>unit</th>" in section
    assert "field" not in re.findall(r"<th[^>]*>(.*?)</th>", section)
    assert "noise scale B_simple = tr Σ / ‖∇F‖²</td><td class='n'>40</td><td>sequences" in section


def test_claims_json_is_machine_readable(report):
    out, doc, page = report
    assert json.loads((out / "claims.json").read_text()) == doc
    assert doc["roles"]["adloco"] == "adloco" and doc["roles"]["ablations"] == ["adloco-no-merge"]
    assert doc["targets"] and doc["target_perplexity"] == min(doc["targets"])
    assert [c["number"] for c in doc["claims"]] == [1, 2, 3]
    head = next(c for c in doc["claims"][0]["comparisons"] if c["headline"])
    assert {"effect_estimate", "effect_interval", "verdict", "reason", "per_seed"} <= set(head)
    interval = head["effect_interval"]
    assert interval["low"] <= head["effect_estimate"] <= interval["high"]
    assert interval["kind"] == "range over seeds" and interval["coverage"] == 0.75
    assert [s["seed"] for s in head["per_seed"]] == [0, 1, 2]
    assert head["effect_p_adloco_less"] in (1 / 8, 2 / 8, 3 / 8, 5 / 8, 6 / 8, 7 / 8, 1.0)
    assert set(head["under_alternative_rules"]) == {"reached", "between", "merged",
                                                    "communications", "pairing",
                                                    "paired_test", "equal_time"}  # fmt: skip
    assert doc["reference_perplexity"]["unigram"] == 120.0 and doc["base"]["val_perplexity"] == 64
    assert doc["headline"]["runs"][0] == "adloco" and doc["rules"]["reached"] == "stays"
    assert {m["mechanism"] for m in doc["mechanisms"]} == {
        "batch grows", "trainers merge", "switch mode engages"
    }  # fmt: skip
    # The fixture has no ddp run: no share of its gain, and the page says why.
    assert {k: doc["gain_shares"][k] for k in ("shares", "note")} == {
        "shares": {},
        "note": "no ddp run",
    }
    # Each run's climb, by brute force from curves.csv: its seeds' highest perplexity over
    # the base's (64), the median over seeds.
    import csv
    import statistics

    highest: dict[tuple[str, str], float] = {}
    for row in csv.DictReader((out / "curves.csv").open()):
        key = (row["run"], row["seed"])
        highest[key] = max(highest.get(key, 0.0), float(row["val_perplexity"]))
    by_run: dict[str, list[float]] = {}
    for (run, _), value in highest.items():
        by_run.setdefault(run, []).append(value / 64)
    assert doc["gain_shares"]["climbs"] == pytest.approx(
        {run: statistics.median(v) for run, v in by_run.items()}
    )
    assert "Share of the ddp anchor's gain: none (no ddp run)." in page
    # Mechanism checks have their own section, after the verdicts.
    assert page.index("id='mechanisms'") > page.index("id='claims'")


@pytest.mark.heavy
def test_same_inputs_give_the_same_page(report, tmp_path, engine_fixture, references_and_base):
    out, _, page = report
    f = engine_fixture
    data, base = references_and_base(tmp_path / "inputs")
    again = tmp_path / "report"  # not tmp_path: it holds the inputs, which a report never replaces
    brought = {"rooflines": BROUGHT_ROOFLINES, "networks": BROUGHT_NETWORKS}
    build_report(report_request(f, again, data=data, base=base, **brought))
    assert (again / "index.html").read_text() == page
    assert (again / "regimes.csv").read_bytes() == (out / "regimes.csv").read_bytes()


@pytest.mark.heavy
def test_hand_made_tree_with_missing_optional_files(fixtures_dir, tmp_path):
    f = fixtures_dir
    build_report(report_request(f, tmp_path))
    page = (tmp_path / "index.html").read_text()
    # One seed: verdicts are inconclusive and the page says why.
    assert "1 seed: diloco, adloco, adloco-no-merge" in page and "inconclusive" in page
    assert "Reference perplexities unavailable" in page and "No base model given" in page
    # Rows without slot_work cannot be recomputed: no regime figure, and the page says so.
    assert "Not drawn: no regime cells" in page
    for _, width, _ in min_table_widths(page):
        assert width <= PAGE_WIDTH_PX


def test_regime_section_says_what_it_cannot_recompute(report):
    out, doc, page = report
    section = page[page.index("id='regimes'") : page.index("id='runs'")]
    for heading in ("The regime map", "Claim 1 on brought devices and networks",
                    "What each sweep varies, and what it cannot recompute"):  # fmt: skip
        assert heading in section
    assert "the passes are those the runs&#39; max batch allowed" in section
    assert doc["regime_map"]["devices"] == [
        {"name": "fast", "source": "roofline: 0.001 s a sequence, flat up to 8 sequences, "
         "update 0 s"}
    ]  # fmt: skip
    header = (out / "regimes.csv").read_text().splitlines()[0].split(",")
    assert {"saturation_batch", "latency_s", "network", "p_adloco_faster"} <= set(header)
