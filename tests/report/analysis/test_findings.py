"""What the report finds (report/analysis/findings.py): the runs' clock in words."""

from __future__ import annotations

from adloco.config import section
from adloco.formats.clock import StepTimeCurve
from adloco.report.analysis.findings import own_clock
from adloco.report.analysis.regime_sweep import ClockModel

CLUSTER = {"network": {"bandwidth_gbit_s": 2.5, "latency_s": 0.01},
           "slot_sharing": "time_slicing",
           "devices": [{"name": "d", "count": 1, "memory_gib": 1.0}]}  # fmt: skip


def test_the_runs_own_clock_in_words_and_why_a_linear_one_cannot_test_time():
    cluster = section("cluster", CLUSTER)
    curved = ClockModel("run", "own", {"d": StepTimeCurve.roofline(0.01, 4)}, "")
    clock, reason = own_clock(cluster, [curved])
    assert clock == {
        "text": "each device's step-time curve, slots time slicing, 2.5 Gbit/s, latency 0.01 s",
        "slot_sharing": "time_slicing",
        "bandwidth_gbit_s": 2.5,
        "latency_s": 0.01,
    }
    assert reason == ""
    # Every pass costs the same per sequence and updates are free: time follows tokens.
    linear = ClockModel("run", "own", {"d": StepTimeCurve((1, 8), (0.5, 4.0), 0.0)}, "")
    clock, reason = own_clock(cluster, [linear])
    assert clock["text"].endswith(" (linear in tokens)")
    assert reason.startswith("the runs' clock charges compute in proportion to tokens")
    assert own_clock(cluster, [])[1] == ""  # no curve of the runs: nothing to judge
