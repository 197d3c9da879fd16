"""The target ladder: derived levels, to-target numbers per seed, censoring."""

from __future__ import annotations

import math

import pytest

from adloco.config import ConfigError
from adloco.report.ladder import ceil_significant, ladder_table, to_target
from adloco.report.summary import reach

INF = math.inf


def test_ceil_significant():
    assert ceil_significant(47.23) == 47.3
    assert ceil_significant(1234.0) == 1240.0
    assert ceil_significant(60.0) == 60.0


def two_seeds(ws):
    # diloco: best 60 (seed 0) and 70 (seed 1); first evaluations 100 and 110.
    ws.run(
        "diloco", {"method": "diloco"}, {0: ws.single([100, 80, 60]), 1: ws.single([110, 90, 70])}
    )
    # adloco: best 50 and 65, first (run-level) 90 and 95.
    ws.run("adloco", ws.FULL_ADLOCO,
           {0: ws.pair([90, 50], [95, 55]), 1: ws.pair([95, 65], [99, 66])})  # fmt: skip
    # localsgd stalls at 95: it must not pull the derived ladder up.
    ws.run("localsgd", {"method": "localsgd"}, {0: ws.single([120, 95]), 1: ws.single([120, 96])})


def test_derived_ladder_every_compared_seed_reaches(workspace):
    two_seeds(workspace)
    runs, roles, ladder, _ = workspace.load(target_levels=2)
    # Hardest: the highest best among adloco and diloco seeds = max(60, 70, 50, 65) = 70.
    # Easiest bound: the lowest first evaluation = min(100, 110, 90, 95) = 90.
    # Two levels: 70 * (90/70)^(0/2) = 70 and 70 * (90/70)^(1/2) = 79.37 -> 79.4.
    assert ladder.targets == (79.4, 70.0)
    assert ladder.main == 70.0 and ladder.source == "derived"
    assert "adloco, diloco" in ladder.note
    for name in ("adloco", "diloco"):
        for t in ladder.targets:
            assert all(math.isfinite(v) for v in to_target(runs, name, t, "sim_time_s"))


def test_censored_seeds_are_counted_not_averaged(workspace):
    two_seeds(workspace)
    runs, roles, ladder, _ = workspace.load(target_levels=2)
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
    two_seeds(workspace)
    runs, roles, ladder, _ = workspace.load([80, 60], main_target=65)
    assert ladder.targets == (80.0, 65.0, 60.0) and ladder.main == 65.0
    # diloco seed 1 never reaches 60: censored, seed 0 at round 3.
    assert to_target(runs, "diloco", 60, "sim_time_s") == [3.0, INF]


def test_old_target_perplexity_is_a_one_level_ladder(workspace):
    two_seeds(workspace)
    _, _, ladder, _ = workspace.load(target_perplexity=75.0)
    assert ladder.targets == (75.0,) and ladder.main == 75.0
    with pytest.raises(ConfigError, match="report.targets"):
        workspace.load([70], target_perplexity=75.0)


def test_unknown_target_run_is_named(workspace):
    two_seeds(workspace)
    with pytest.raises(ConfigError, match="report.target_runs: no run named nope"):
        workspace.load(target_runs=["nope"])


def test_reach_on_the_engine_fixture(engine_fixture):
    from adloco.config import load_config
    from adloco.report.inputs import load_runs
    from adloco.report.summary import round_values, run_level_perplexity

    config = load_config(engine_fixture / "config.yaml")
    runs = load_runs(engine_fixture / "runs", config)
    for r in runs:
        curve = run_level_perplexity(r.rows)
        target = sorted(curve.values())[len(curve) // 2]
        got = reach(r.rows, target)
        # Brute force: the first round at or below the target, its cumulative values.
        first = min(k for k, p in curve.items() if p <= target)
        assert got["round"] == first
        assert got["sim_time_s"] == max(x["sim_time_s"] for x in r.rows if x["round"] == first)
        assert got["bytes"] == round_values(r.rows, "bytes_total")[first]
