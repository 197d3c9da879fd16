"""Perplexity at equal simulated time: the time the rule picks, and each seed's perplexity then.

Part of ``adloco report``, beside time to target: where time to target asks
how long each run needs to get somewhere, this asks where each run is after
the same time. The time is a stated rule (``report.equal_time``) over the
headline runs (AdLoCo, DiLoCo, the best baseline, the ddp anchor):

- ``fastest`` (default): when the first seed of those runs finishes, so
  every run is compared while it still trains;
- ``slowest``: when the last one finishes; a run that finished earlier keeps
  its final model. With equal token budgets this compares final models.

A seed's perplexity at time T is the run-level perplexity of its last
evaluation at or before T (:func:`adloco.report.analysis.summary.perplexity_at_time`);
a seed not evaluated by then has none (NaN), and is left out of the pairs.
"""

from __future__ import annotations

import math

from adloco.report.analysis.summary import perplexity_at_time, round_values
from adloco.report.inputs.results import RunSeed

EQUAL_TIME_RULES = ("fastest", "slowest")


def finish_times_s(runs: list[RunSeed], names: list[str]) -> list[float]:
    """The final simulated time of every seed of the runs ``names``."""
    out = []
    for r in runs:
        if r.run in names:
            times = round_values(r.rows, "sim_time_s")
            if times:
                out.append(times[max(times)])
    return out


def equal_time_s(runs: list[RunSeed], names: list[str], rule: str) -> float | None:
    """The simulated time at which the runs ``names`` are compared under ``rule``."""
    if rule not in EQUAL_TIME_RULES:
        raise ValueError(f"equal-time rule must be one of {EQUAL_TIME_RULES}, got {rule!r}")
    finished = finish_times_s(runs, names)
    if not finished:
        return None
    return min(finished) if rule == "fastest" else max(finished)


def perplexities_at(runs: list[RunSeed], name: str, time_s: float) -> dict[int, float]:
    """Seed -> run-level perplexity of run ``name`` at ``time_s`` (NaN: not evaluated yet)."""
    out = {}
    for r in sorted((r for r in runs if r.run == name), key=lambda r: r.seed):
        ppl = perplexity_at_time(r.rows, time_s)
        out[r.seed] = math.nan if ppl is None else ppl
    return out
