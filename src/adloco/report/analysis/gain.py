"""How much of the synchronous anchor's gain each run keeps at the token budget.

Part of ``adloco report``. Every run continues the base for the same tokens;
the ddp anchor (an all-reduce of every step's gradient) shows what those
tokens buy without saving communication. A run's *share of ddp's gain* is

    ln(p_base / p_run) / ln(p_base / p_ddp),

with p_run and p_ddp the median final validation perplexities over seeds:
1 when the run gains in log-perplexity what ddp gains, 0 when it ends at the
base, negative when it ends above it. There is no share without the base's
perplexity, without a ddp run, or when ddp does not end below the base; the
note says which. A reader sees how much the DiLoCo family trades for its
fewer communications before reading which of them is faster.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import median

from adloco.report.analysis.summary import run_level_perplexity
from adloco.report.inputs.results import RunSeed


@dataclass(frozen=True)
class GainShares:
    shares: dict[str, float] = field(default_factory=dict)  # run -> share, configuration order
    note: str = ""  # why there are no shares ("" when there are)
    # run -> median over seeds of its highest evaluated perplexity over the base's
    climbs: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"shares": dict(self.shares), "note": self.note or None,
                "climbs": dict(self.climbs)}  # fmt: skip


def climb(run: RunSeed, base_perplexity: float | None) -> float | None:
    """A seed's climb: its highest evaluated perplexity over the base's; None without either.

    A run that continues the base without re-learning it stays near 1 (docs/regime.md).
    """
    curve = run_level_perplexity(run.rows)
    if not curve or not base_perplexity:
        return None
    return max(curve.values()) / base_perplexity


def climbs(runs: list[RunSeed], base_perplexity: float) -> dict[str, float]:
    """Each run's climb, median over its seeds, in configuration order."""
    out = {}
    for name in dict.fromkeys(r.run for r in runs):
        values = [c for r in runs if r.run == name and (c := climb(r, base_perplexity))]
        if values:
            out[name] = median(values)
    return out


def median_final(runs: list[RunSeed], name: str) -> float | None:
    values = [
        float(v)
        for r in runs
        if r.run == name
        and isinstance(v := r.summary.get("final_val_perplexity"), (int, float))
        and math.isfinite(v)
    ]
    return median(values) if values else None


def gain_shares(runs: list[RunSeed], ddp: str | None, base_perplexity: float | None) -> GainShares:
    """Every run's share of ddp's log-perplexity gain over the base (see the module)."""
    if base_perplexity is None:
        return GainShares(note="no base model perplexity (report --base)")
    climb = climbs(runs, base_perplexity)
    if ddp is None:
        return GainShares(note="no ddp run", climbs=climb)
    anchor = median_final(runs, ddp)
    if anchor is None or anchor >= base_perplexity:
        return GainShares(note=f"{ddp} does not end below the base", climbs=climb)
    full = math.log(base_perplexity / anchor)
    shares = {}
    for name in dict.fromkeys(r.run for r in runs):
        final = median_final(runs, name)
        if final is not None:
            shares[name] = math.log(base_perplexity / final) / full
    return GainShares(shares, climbs=climb)
