"""What each run spends to reach each target: per seed, censored seeds counted, not averaged."""

from __future__ import annotations

import math

from adloco.report.ladder import ladder_table, to_target
from adloco.report.summary import reach

INF = math.inf


def test_censored_seeds_are_counted_not_averaged(workspace):
    workspace.two_seed_runs()
    runs, roles, ladder, _ = workspace.load([79.4, 70.0])
    table = ladder_table(runs, ladder)
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


def test_configured_targets_and_main_target(workspace):
    workspace.two_seed_runs()
    runs, roles, ladder, _ = workspace.load([80, 65, 60], main=65)
    assert ladder.targets == (80.0, 65.0, 60.0) and ladder.main == 65.0
    assert ladder.source == "absolute" and "fixed before the runs" in ladder.note
    # diloco seed 1 never reaches 60: censored, seed 0 at round 3.
    assert to_target(runs, "diloco", 60, "sim_time_s") == {0: 3.0, 1: INF}


def test_to_target_follows_the_reach_rule(workspace):
    # Seed 0 dips to 55 at round 2 and comes back to 70 at round 3, then 58 at round 4.
    workspace.run("diloco", {"method": "diloco"}, {0: workspace.single([90, 55, 70, 58])})
    runs, *_ = workspace.load([60])
    assert to_target(runs, "diloco", 60, "communications", "first") == {0: 2.0}
    assert to_target(runs, "diloco", 60, "communications", "stays") == {0: 4.0}


def test_reach_on_the_engine_fixture(engine_fixture):
    from adloco.config import load_config
    from adloco.report.inputs import load_runs
    from adloco.report.summary import round_values, run_level_perplexity

    config = load_config(engine_fixture / "config.yaml")
    runs = load_runs(engine_fixture / "runs", config)
    for r in runs:
        curve = run_level_perplexity(r.rows)
        target = sorted(curve.values())[len(curve) // 2]
        got = reach(r.rows, target, "first")
        # Brute force: the first round at or below the target, its cumulative values.
        first = min(k for k, p in curve.items() if p <= target)
        assert got["round"] == first
        assert got["sim_time_s"] == max(x["sim_time_s"] for x in r.rows if x["round"] == first)
        assert got["bytes"] == round_values(r.rows, "bytes_total")[first]
        # Stays: the first round from which no later evaluation is above the target.
        stays = reach(r.rows, target, "stays")
        later_ok = [k for k in curve if all(p <= target for j, p in curve.items() if j >= k)]
        assert (stays["round"] if stays else None) == (min(later_ok) if later_ok else None)


def test_the_ladder_figure_of_targets_no_run_reached_has_no_legend(workspace):
    # A short run that never gets below its targets (the tiny pipeline's) still
    # gets its figure: axes and reference lines, no legend of nothing.
    from adloco.report.figures_runs import ladder_figure

    workspace.two_seed_runs()
    runs, _, ladder, _ = workspace.load([1.0])
    table = ladder_table(runs, ladder)
    assert all(not s["communications"].reached for s in table.values())
    png = ladder_figure(runs, table, ladder.targets, {"communications": "comms"})
    assert png.startswith(b"\x89PNG")
