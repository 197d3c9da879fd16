"""Figures of the runs: the drawn data read back from the axes, against numbers worked by hand.

Rows come from the workspace builder (conftest.py): one row per trainer and
round, 100 tokens a row, 1 simulated second a round, so every x value is known.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from adloco.report.analysis.ladder import ladder_table
from adloco.report.figures.run_figures import (
    ablations_figure,
    batch_figure,
    curves_figure,
    ladder_figure,
    merges_figure,
    seed_band,
    seed_curves,
    trainers_figure,
)

MERGE = {"type": "merge", "merged": [0, 1], "kept": 0, "batch": 8, "val_perplexity_merged": 77}


def labelled(ax, label: str):
    (line,) = [line for line in ax.lines if line.get_label() == label]
    return line


def test_seed_band_interpolates_where_every_seed_has_data():
    curves = [([1, 2, 3], [10, 8, 6]), ([2, 2.5, 4], [9, 8, 5])]
    x, mid, low, high = seed_band(curves)
    # Common range [2, 3]; seed 1 at 3 is 8 + (5 - 8)(3 - 2.5)/(4 - 2.5) = 7; seed 0 at 2.5 is 7.
    assert x == [2, 2.5, 3]
    assert mid == pytest.approx([8.5, 7.5, 6.5])
    assert low == pytest.approx([8, 7, 6]) and high == pytest.approx([9, 8, 7])
    assert seed_band([([1], [5])]) == ([1], [5], [5], [5])  # one seed: itself
    assert seed_band([([1, 2], [5, 4]), ([3, 4], [3, 2])]) is None  # no common x
    assert seed_band([]) is None


def test_seed_curves_keep_the_last_value_of_a_repeated_x(workspace):
    ws = workspace
    # Rounds 1-2 evaluated; the x of round 3 repeats round 2's when nothing was trained.
    ws.run("diloco", {"method": "diloco"}, {0: ws.single([90, 80, None])})
    ws.run("adloco", ws.FULL_ADLOCO, {0: ws.single([95, 85, 75])})
    runs, *_ = ws.load([60])
    assert seed_curves(runs, "diloco", "sim_time_s") == [([1.0, 2.0], [90, 80])]
    assert seed_curves(runs, "adloco", "tokens_total") == [([100, 200, 300], [95, 85, 75])]


def test_curves_are_the_median_over_seeds_on_every_axis(workspace, drawn):
    ws = workspace
    ws.run("diloco", {"method": "diloco"},
           {0: ws.single([90, 80, 70]), 1: ws.single([100, 90, 80])})  # fmt: skip
    ws.run("adloco", ws.FULL_ADLOCO, {0: ws.single([95, 85, 75]), 1: ws.single([95, 85, 75])})
    runs, *_ = ws.load([60])
    assert curves_figure(runs, 72.0, {"unigram": 85.0}) == b"drawn"
    (fig,) = drawn
    tokens, comms, _bytes, sim = fig.axes[:4]
    line = labelled(tokens, "diloco")
    assert list(line.get_xdata()) == [100, 200, 300]
    assert list(line.get_ydata()) == pytest.approx([95, 85, 75])
    assert list(labelled(comms, "diloco").get_xdata()) == [1, 2, 3]
    assert list(labelled(sim, "adloco").get_ydata()) == pytest.approx([95, 85, 75])
    # The main target and the unigram perplexity as horizontal lines on each panel.
    flat = {round(line.get_ydata()[0], 6) for line in sim.lines if len(set(line.get_ydata())) == 1}
    assert {72.0, 85.0} <= flat
    # The band between the seeds of diloco: 90..100 at the first round.
    (band,) = [c for c in tokens.collections if c.get_paths()]
    ys = band.get_paths()[0].vertices[:, 1]
    assert ys.min() == pytest.approx(70) and ys.max() == pytest.approx(100)


def test_no_perplexity_no_curves(workspace):
    ws = workspace
    ws.run("diloco", {"method": "diloco"}, {0: ws.single([None, None])})
    runs, *_ = ws.load([60])
    assert curves_figure(runs, None) is None


def test_the_ladder_shows_median_and_range_to_each_target(workspace, drawn):
    ws = workspace
    # diloco reaches 85 (and stays) at round 2 on seed 0, round 3 on seed 1: 2 s and 3 s.
    ws.run("diloco", {"method": "diloco"},
           {0: ws.single([90, 80, 70]), 1: ws.single([100, 90, 80])})  # fmt: skip
    ws.run("adloco", ws.FULL_ADLOCO, {0: ws.single([80, 70, 60]), 1: ws.single([80, 70, 60])})
    # Whole rounds (report.between: round) keep the bars on the hand-made rounds.
    runs, roles, ladder, settings = ws.load([85], between="round")
    table = ladder_table(runs, ladder, settings.reach_rule)
    quantities = {"sim_time_s": "time", "communications": "comms"}
    assert ladder_figure(runs, table, ladder.targets, quantities) == b"drawn"
    (fig,) = drawn
    time_ax = fig.axes[0]
    bars = {c.get_label(): c for c in time_ax.containers}
    data = bars["diloco"].lines[0]
    assert list(data.get_ydata()) == pytest.approx([2.5])
    # Two runs in configuration order (the YAML's keys sorted: adloco, diloco), each offset
    # by 0.4 % of the target per place: diloco (index 1) at 85 x (1 + 0.004 x (1 - 1)).
    assert list(data.get_xdata()) == pytest.approx([85.0])
    assert list(bars["adloco"].lines[0].get_xdata()) == pytest.approx([85 * (1 - 0.004)])
    (segment,) = bars["diloco"].lines[2][0].get_segments()
    assert [y for _, y in segment] == pytest.approx([2.0, 3.0])
    assert list(bars["adloco"].lines[0].get_ydata()) == pytest.approx([1.0])
    assert time_ax.xaxis_inverted()
    assert ladder_figure(runs, table, (), quantities) is None


def test_active_trainers_median_per_round(workspace, drawn):
    ws = workspace
    two_then_one = [[{"ppl": 90}, {"ppl": 95}], [{"ppl": 85}, {"ppl": 88}], [{"ppl": 80}]]
    ws.run("adloco", ws.FULL_ADLOCO, {0: two_then_one, 1: ws.pair([90] * 3, [95] * 3)})
    ws.run("diloco", {"method": "diloco"}, {0: ws.single([90] * 3), 1: ws.single([90] * 3)})
    runs, *_ = ws.load([60])
    assert trainers_figure(runs, ["adloco", "diloco"]) == b"drawn"
    (fig,) = drawn
    (ax,) = fig.axes
    line = labelled(ax, "adloco")
    assert list(line.get_xdata()) == [1, 2, 3]
    assert list(line.get_ydata()) == [2.0, 2.0, 1.5]  # median of 1 and 2 trainers
    assert line.get_drawstyle() == "steps-post"
    assert [line.get_label() for line in ax.lines] == ["adloco"]  # diloco never has two
    assert trainers_figure(runs, ["diloco"]) is None


def test_batch_per_trainer_requested_and_effective(workspace, drawn):
    ws = workspace
    rounds = [
        [{"ppl": 90, "req": 4, "eff": 4}, {"ppl": 95, "req": 8, "eff": 6}],
        [{"ppl": 80, "req": 16, "eff": 12, "mode": "accumulate"}, {"ppl": 85, "req": 8}],
    ]
    ws.run("adloco", ws.FULL_ADLOCO, {1: rounds, 0: rounds})
    ws.run("diloco", {"method": "diloco"}, {0: ws.single([90, 80]), 1: ws.single([90, 80])})
    runs, *_ = ws.load([60])
    assert batch_figure(runs, ["adloco"]) == b"drawn"
    (fig,) = drawn
    ax = fig.axes[0]
    assert ax.get_title() == "adloco (seed 0)"  # the first seed
    requested = labelled(ax, "trainer 0")
    assert list(requested.get_xdata()) == [1, 2] and list(requested.get_ydata()) == [4, 16]
    effective = [line for line in ax.lines if line.get_linestyle() == "--"]
    assert [list(line.get_ydata()) for line in effective] == [[4, 12], [6, 8]]
    (accumulate,) = [c for c in ax.collections if c.get_label() == "accumulate"]
    assert accumulate.get_offsets().tolist() == [[2, 12]]
    assert batch_figure(runs, ["diloco"]) is not None  # diloco logs requested_batch too
    assert batch_figure(runs, ["nothing"]) is None


def test_merges_marked_at_the_merge_round_with_the_merged_model(workspace, drawn):
    ws = workspace
    rounds = [
        [{"ppl": 90}, {"ppl": 95}],
        [{"ppl": 80, "events": [MERGE]}, {"ppl": 85}],
        [{"ppl": 70}],
    ]
    ws.run("adloco", ws.FULL_ADLOCO, {0: rounds})
    ws.run("diloco", {"method": "diloco"}, {0: ws.single([90, 80, 70])})
    runs, *_ = ws.load([60])
    assert merges_figure(runs, "adloco", {}) == b"drawn"
    (fig,) = drawn
    ax = fig.axes[0]
    # Tokens: 200 a round while two trainers train, then 100: merge round 2 at 400 tokens.
    vertical = [line for line in ax.lines if len(set(line.get_xdata())) == 1]
    assert [line.get_xdata()[0] for line in vertical] == [400]
    (circle,) = ax.collections
    assert circle.get_offsets().tolist() == [[400, 77]]
    assert list(labelled(ax, "trainer 0").get_ydata()) == [90, 80, 70]
    assert merges_figure(runs, "diloco") is None


def test_ablations_per_seed_with_the_median(workspace, drawn):
    ws = workspace
    ws.run("adloco", ws.FULL_ADLOCO, {0: ws.single([80, 70]), 1: ws.single([90, 70])})
    ws.run("adloco-no-merge", {**ws.FULL_ADLOCO, "merge": "none"},
           {0: ws.single([90, 80, 75]), 1: ws.single([100, 90, 80])})  # fmt: skip
    ws.run("diloco", {"method": "diloco"}, {0: ws.single([90, 80]), 1: ws.single([90, 80])})
    runs, roles, ladder, settings = ws.load([75], between="round")
    assert roles.ablations == ["adloco-no-merge"]
    assert ablations_figure(runs, roles, 75.0, settings.reach_rule) == b"drawn"
    (fig,) = drawn
    time_ax, final_ax = fig.axes
    adloco, ablation = time_ax.collections
    # AdLoCo reaches 75 at round 2 on both seeds; the ablation at round 3 on seed 0 only.
    assert adloco.get_offsets().tolist() == [[2.0, 0], [2.0, 0]]
    assert ablation.get_offsets().tolist() == [[3.0, 1]]
    assert "1 seed(s) never reached it" in [t.get_text() for t in time_ax.texts]
    medians = [line.get_xdata()[0] for line in time_ax.lines]
    assert medians == [2.0, 3.0]
    assert np.array(final_ax.collections[1].get_offsets()).tolist() == [[75, 1], [80, 1]]
    assert math.isclose(final_ax.lines[1].get_xdata()[0], 77.5)
    roles.ablations = []
    assert ablations_figure(runs, roles, 75.0) is None
