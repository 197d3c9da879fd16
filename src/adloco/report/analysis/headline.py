"""The headline table: each seed's value for each headline run, side by side.

Part of ``adloco report``. The headline runs are AdLoCo, DiLoCo, the best
baseline (lowest median simulated time to the main target) and the ddp anchor
(:func:`adloco.report.analysis.claims.headline_runs`). For every seed each of them
has, the table gives the simulated time and communications to the main
target (censored: never reached, or not stayed below) and the perplexity at
the equal simulated time (:mod:`adloco.report.analysis.equal_time`), so a reader sees
the values the paired tests rest on, seed by seed.
"""

from __future__ import annotations

from dataclasses import dataclass

from adloco.report.analysis.claims import Context, headline_runs, values_of
from adloco.report.analysis.equal_time import equal_time_s

HEADLINE_QUANTITIES = ("sim_time_s", "communications", "perplexity_at_time")


@dataclass
class Headline:
    runs: list[str]
    seeds: list[int]
    time_s: float | None  # the equal simulated time
    values: dict[str, dict[str, dict[int, float]]]  # quantity -> run -> seed -> value

    def as_dict(self) -> dict:
        def clean(v):
            return v if v == v and abs(v) != float("inf") else None

        return {
            "runs": self.runs,
            "seeds": self.seeds,
            "equal_time_s": self.time_s,
            "values": {
                q: {n: {str(s): clean(v) for s, v in by.items()} for n, by in runs.items()}
                for q, runs in self.values.items()
            },
        }


def headline_table(ctx: Context) -> Headline | None:
    if ctx.roles.adloco is None or ctx.ladder.main is None:
        return None
    names = headline_runs(ctx)
    time_s = equal_time_s(ctx.runs, names, ctx.settings.section.equal_time)
    values = {}
    for q in HEADLINE_QUANTITIES:
        if q == "perplexity_at_time" and time_s is None:
            continue
        target = None if q == "perplexity_at_time" else ctx.ladder.main
        values[q] = {n: values_of(ctx, n, q, target, time_s) for n in names}
    seeds = sorted({s for by in values.values() for run in by.values() for s in run})
    return Headline(names, seeds, time_s, values)
