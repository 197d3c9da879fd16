"""The page's building blocks (page/parts.py): numbers in their units, cells, tables, figures."""

from __future__ import annotations

import math
from types import SimpleNamespace as NS

from adloco.formats.clock import StepTimeCurve
from adloco.report.analysis.seed_stats import Spread
from adloco.report.page.parts import (
    curve_text,
    esc,
    figure,
    human_bytes,
    levels_note,
    number,
    spread_cell,
    table,
    verdict,
)


def test_numbers_in_the_unit_of_their_quantity():
    assert number(None) == number(math.nan) == "–"
    assert number(math.inf, "sim_time_s") == "never"
    assert number(3 * 2**20, "bytes_total") == "3 MiB" and human_bytes(512) == "512 B"
    assert number(0.123456, "sim_time_s") == "0.123 s"
    assert number(4800.0) == "4,800"
    assert number("<b>") == "&lt;b&gt;" and number(True) == "True"


def test_spread_cells_show_censored_seeds_never_averaged():
    assert spread_cell(Spread.of([2.0, 3.0, 4.0]), "sim_time_s") == "3 s<small>2 s – 4 s</small>"
    assert spread_cell(Spread.of([2.0]), "") == "2"
    # One of three seeds never reached it: the median is still measured, the top is not.
    cell = spread_cell(Spread.of([2.0, 3.0, math.inf]), "sim_time_s")
    assert cell == "3 s<small>2 s – &gt; budget · 2/3 reached</small>"
    none = spread_cell(Spread.of([math.inf, math.inf]), "")
    assert none == "&gt; budget<small>0/2 seeds reached</small>"
    assert spread_cell(Spread.of([]), "") == "–"


def test_tables_verdicts_and_figures():
    html = table(["a", "n"], [["x", "1"], ["y", "2"]], numeric=(1,))
    assert html == (
        "<table><thead><tr><th>a</th><th class='n'>n</th></tr></thead><tbody>"
        "<tr><td>x</td><td class='n'>1</td></tr><tr><td>y</td><td class='n'>2</td></tr>"
        "</tbody></table>"
    )
    assert verdict("supported") == "<span class='verdict supported'>supported</span>"
    assert "verdict not-testable" in verdict("anything else")
    assert figure(None, "trainers", "no data") == "<p class='note'>Not drawn: no data.</p>"
    assert figure(None, "trainers", "a <b>") == "<p class='note'>Not drawn: a &lt;b&gt;.</p>"
    png = b"\x89PNG"  # base64: iVBORw==
    assert figure(png, "trainers", "no data") == (
        "<figure><img alt='active trainers' src='data:image/png;base64,iVBORw=='><figcaption>"
        "Trainers alive per round (median over seeds): each step down is a merge.</figcaption>"
        "</figure>"
    )
    drawn = figure(png, "headline_curves", "none", anchor=" d, the ddp anchor.")
    assert drawn.endswith("so their differences show. d, the ddp anchor.</figcaption></figure>")
    assert esc("<&>") == "&lt;&amp;&gt;"


def test_curve_text_and_the_levels_line():
    curve = StepTimeCurve((1, 8), (0.5, 1.25), 0.1)
    assert curve_text(curve) == "pass time by micro-batch 1: 0.5 s, 8: 1.25 s; update 0.1 s"
    page = NS(found=NS(levels={"base model": 64.0, "unigram": 120.0}))  # shown highest first
    assert levels_note(page) == "<p class='note'>For comparison — unigram 120, base model 64.</p>"
    assert "No reference perplexities" in levels_note(NS(found=NS(levels={})))
