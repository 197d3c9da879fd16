"""What each run spends to reach each target: per seed, censored seeds counted, not averaged."""

from __future__ import annotations

import math

import pytest
from by_hand import at_target, logged

from adloco.report.analysis.ladder import ladder_table, to_target
from adloco.report.analysis.summary import reach
from adloco.report.settings import ReachRule

INF = math.inf
ROUND_ENDS = ReachRule("stays", "round")  # the values at the end of the reaching round
INTERPOLATED = ReachRule("stays", "interpolated")  # between evaluations, for every method


def test_censored_seeds_are_counted_not_averaged(workspace):
    workspace.two_seed_runs()
    runs, roles, ladder, _ = workspace.load([79.4, 70.0])
    table = ladder_table(runs, ladder, ROUND_ENDS)
    # localsgd never gets to 70 or 79.4: censored in both seeds.
    s = table[(70.0, "localsgd")]["communications"]
    assert (s.reached, s.seeds, s.median) == (0, 2, INF)
    # diloco to 70: seed 0 at round 3 (80 > 70 at round 2), seed 1 at round 3 (70 <= 70).
    s = table[(70.0, "diloco")]["tokens"]
    assert (s.median, s.low, s.high, s.reached) == (300, 300, 300, 2)
    # adloco to 70: seed 0 round 2 (min(50, 55)); seed 1 round 2 (min(65, 66)); rows of 100
    # tokens, two per round -> 400 tokens, 4 communications, bytes 10 per communication.
    assert table[(70.0, "adloco")]["communications"].median == 4
    assert table[(70.0, "adloco")]["bytes"].median == 40
    # Interpolated (the alternative for round-based methods): diloco seed 0 crosses 70
    # between 80 (round 2) and 60 (round 3), seed 1 meets it at round 3.
    s = ladder_table(runs, ladder, INTERPOLATED)[(70.0, "diloco")]["tokens"]
    f = math.log(80 / 70) / math.log(80 / 60)
    assert (s.low, s.high) == (pytest.approx(200 + 100 * f), 300)


def test_configured_targets_and_main_target(workspace):
    workspace.two_seed_runs()
    runs, roles, ladder, _ = workspace.load([80, 65, 60], main=65)
    assert ladder.targets == (80.0, 65.0, 60.0) and ladder.main == 65.0
    assert ladder.source == "absolute" and "fixed before the runs" in ladder.note
    # diloco seed 1 never reaches 60: censored, seed 0 at round 3.
    assert to_target(runs, "diloco", 60, "sim_time_s", ROUND_ENDS) == {0: 3.0, 1: INF}
    # seed 0 meets 60 exactly at round 3: the same interpolated.
    assert to_target(runs, "diloco", 60, "sim_time_s", INTERPOLATED) == {0: 3.0, 1: INF}


def test_to_target_follows_the_reach_rule(workspace):
    # Seed 0 dips to 55 at round 2 and comes back to 70 at round 3, then 58 at round 4.
    workspace.run("diloco", {"method": "diloco"}, {0: workspace.single([90, 55, 70, 58])})
    runs, *_ = workspace.load([60])
    first, stays = ReachRule("first", "round"), ROUND_ENDS
    assert to_target(runs, "diloco", 60, "communications", first) == {0: 2.0}
    assert to_target(runs, "diloco", 60, "communications", stays) == {0: 4.0}
    # Interpolated: first crosses between 90 and 55, stays between 70 and 58.
    f_first = math.log(90 / 60) / math.log(90 / 55)
    f_stays = math.log(70 / 60) / math.log(70 / 58)
    assert to_target(runs, "diloco", 60, "communications", ReachRule("first", "interpolated")) == {
        0: pytest.approx(1 + f_first)
    }
    assert to_target(runs, "diloco", 60, "communications", INTERPOLATED) == {
        0: pytest.approx(3 + f_stays)
    }
    # The default reads a round-based method at the end of the reaching round.
    assert to_target(runs, "diloco", 60, "communications") == {0: 4.0}


def test_reach_on_the_engine_fixture(engine_fixture):
    from adloco.config import load_config
    from adloco.report.analysis.summary import round_values, run_level_perplexity
    from adloco.report.inputs.results import load_runs

    config = load_config(engine_fixture / "config.yaml")
    runs = load_runs(engine_fixture / "runs", config)
    for r in runs:
        curve = run_level_perplexity(r.rows)
        target = sorted(curve.values())[len(curve) // 2]
        got = reach(r.rows, target, ReachRule("first", "round"))
        # Brute force: the first round at or below the target, its cumulative values.
        first = min(k for k, p in curve.items() if p <= target)
        assert got["round"] == first
        assert got["sim_time_s"] == max(x["sim_time_s"] for x in r.rows if x["round"] == first)
        assert got["bytes"] == round_values(r.rows, "bytes_total")[first]
        # Stays: the first round from which no later evaluation is above the target.
        stays = reach(r.rows, target, "stays")
        later_ok = [k for k in curve if all(p <= target for j, p in curve.items() if j >= k)]
        assert (stays["round"] if stays else None) == (min(later_ok) if later_ok else None)
        # Interpolated (the default) against the reading by hand.
        if stays:
            for name, key in (("sim_time_s", "sim_time_s"), ("bytes", "bytes_total")):
                expected = at_target(r.rows, target, logged(r.rows, key))
                assert stays[name] == pytest.approx(expected, rel=1e-12)


def test_the_ladder_figure_of_targets_no_run_reached_has_no_legend(workspace):
    # A short run that never gets below its targets (the tiny pipeline's) still
    # gets its figure: axes and reference lines, no legend of nothing.
    from adloco.report.figures.run_figures import ladder_figure

    workspace.two_seed_runs()
    runs, _, ladder, _ = workspace.load([1.0])
    table = ladder_table(runs, ladder, ROUND_ENDS)
    assert all(not s["communications"].reached for s in table.values())
    png = ladder_figure(runs, table, ladder.targets, {"communications": "comms"})
    assert png.startswith(b"\x89PNG")
