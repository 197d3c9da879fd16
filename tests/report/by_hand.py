"""Quantities at a target read by hand, for the report tests' brute force.

At the end of the reaching round for a round-based method and linear in
log-perplexity between the evaluation just before the reaching one and the
reaching one for ddp (``report.between: model``, the default), or interpolated
for every method (``interpolated``), written out from the rows without the
report's own functions but ``round_to_target`` (tested on its own in
test_summary.py).
"""

from __future__ import annotations

import math

from adloco.report.analysis.summary import round_to_target


def run_curve(rows: list[dict]) -> dict[int, float]:
    """Round -> lowest validation perplexity of its rows."""
    curve: dict[int, float] = {}
    for r in rows:
        if r.get("val_perplexity") is not None:
            curve[r["round"]] = min(curve.get(r["round"], math.inf), r["val_perplexity"])
    return curve


def at_target(
    rows: list[dict], target: float, per_round: dict[int, float], rule="stays", between="model"
) -> float:
    """``per_round`` (cumulative, round -> value at its end) where the run crosses ``target``."""
    k = round_to_target(rows, target, rule)
    if k is None:
        return math.inf
    curve = run_curve(rows)
    earlier = sorted(j for j in curve if j < k)
    if not earlier or (between == "model" and rows[0].get("method") != "ddp"):
        return per_round[k]
    j = earlier[-1]
    f = math.log(curve[j] / target) / math.log(curve[j] / curve[k])
    return per_round[j] + f * (per_round[k] - per_round[j])


def logged(rows: list[dict], key: str) -> dict[int, float]:
    """Round -> largest logged value of a cumulative field."""
    out: dict[int, float] = {}
    for r in rows:
        out[r["round"]] = max(out.get(r["round"], -math.inf), r[key])
    return out
