"""The equal simulated time of the headline runs, and each seed's perplexity then."""

from __future__ import annotations

import math

import pytest

from adloco.report.analysis.equal_time import equal_time_s, finish_times_s, perplexities_at


def test_the_rule_picks_the_first_or_the_last_finish(workspace):
    ws = workspace
    # 1 simulated second a round for diloco (3 rounds), 2 for adloco seed 0, 0.5 for seed 1.
    ws.run("diloco", {"method": "diloco"}, {0: ws.single([90, 80, 70]), 1: ws.single([90, 80, 70])})
    ws.run("adloco", ws.FULL_ADLOCO, {0: ws.single([85, 75]), 1: ws.single([85, 75])},
           {0: 2.0, 1: 0.5})  # fmt: skip
    runs, *_ = ws.load([60])
    assert sorted(finish_times_s(runs, ["diloco", "adloco"])) == [1.0, 3.0, 3.0, 4.0]
    assert equal_time_s(runs, ["diloco", "adloco"], "fastest") == 1.0
    assert equal_time_s(runs, ["diloco", "adloco"], "slowest") == 4.0
    assert equal_time_s(runs, ["diloco"], "fastest") == 3.0
    assert equal_time_s(runs, ["nobody"], "fastest") is None
    with pytest.raises(ValueError, match="equal-time rule must be one of"):
        equal_time_s(runs, ["diloco"], "median")
    # At 1.5 s: diloco's last evaluation is round 1 (90); adloco seed 0 has none yet (2 s),
    # seed 1 finished at 1 s with 75.
    at = perplexities_at(runs, "adloco", 1.5)
    assert math.isnan(at[0]) and at[1] == 75
    assert perplexities_at(runs, "diloco", 1.5) == {0: 90, 1: 90}
