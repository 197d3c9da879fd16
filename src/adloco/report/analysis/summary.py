"""Per-run numbers of the report: run-level perplexity, reaching a target, per-seed summary.

Built on the rows read by :mod:`adloco.report.inputs.results`. The run-level
perplexity at a round is the lowest validation perplexity among the models the
run holds at the end of that round (the model a user would deploy then); a
merge round holds the merged model, evaluated right after the merge, in place
of the trainers merged into it (``report.merged``: at_merge; next_evaluation
reads the trainers before the merge). When a run reaches a
target is a stated rule (``report.reached``, :data:`REACH_RULES`): by
default it *stays*, reaching the target at the first evaluation from which
every later evaluation is at or below it, so a transient dip that the run
climbs back out of does not count; ``first`` takes the first evaluation at or
below it. How the tokens, communications, bytes and simulated time "to
target" are read is a second stated rule (``report.between``,
:data:`BETWEEN_RULES`): by default *model*, at a model that exists: the end
of the reaching round for a method with an outer step (its global model
changes only there, so a crossing inside the round would credit a model that
does not exist yet), and linear in log-perplexity between the evaluation just
before the reaching one and the reaching one for ddp, whose model changes at
every step; *interpolated* interpolates for every method, ``round`` reads the
end of the reaching round for every method. A run that reaches the target at
its first evaluation has no earlier point and is read at that evaluation under
every rule. What counts as a communication is a third (``report.communications``):
network messages (all-reduces over two or more slots and merge transfers), or
the paper's trainer rounds. ``summary.csv`` has one row per run and seed, with
these values at the main target (:mod:`adloco.report.analysis.targets`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from adloco.config.runs import PER_STEP_SYNC
from adloco.formats.metrics import SUMMARY_KEYS, finite_or_none, is_number
from adloco.report.analysis.seed_stats import Spread
from adloco.report.inputs.results import RunSeed
from adloco.report.settings import DEFAULT_RULE, REACH_RULES, ReachRule

# Cumulative quantities measured "to target", with the field that holds them;
# "communications" is what ``report.communications`` counts (COUNTED_FIELDS).
TO_TARGET = {
    "tokens": "tokens_total",
    "communications": "messages_total",
    "trainer_rounds": "communications",
    "bytes": "bytes_total",
    "sim_time_s": "sim_time_s",
}
COUNTED_FIELDS = {"messages": "messages_total", "trainer_rounds": "communications"}

# Per-run numbers beyond summary.json: the optimizer work along the run.
WORK_KEYS = ("optimizer_steps", "inner_lr_sum")

SUMMARY_COLUMNS = (
    "run",
    "seed",
    "method",
    *SUMMARY_KEYS,
    *WORK_KEYS,
    "eval_stderr_pct",
    "target_perplexity",
    "reach_rule",
    "between_rule",
    "merged_rule",
    "communications_rule",
    "round_to_target",
    "tokens_to_target",
    "communications_to_target",
    "trainer_rounds_to_target",
    "bytes_to_target",
    "sim_time_s_to_target",
)


def round_values(rows: list[dict[str, Any]], key: str) -> dict[int, float]:
    """Per round, the largest value of a cumulative field among the round's rows."""
    out: dict[int, float] = {}
    for r in rows:
        value = r.get(key)
        if is_number(value):
            out[r["round"]] = max(out.get(r["round"], value), value)
    return dict(sorted(out.items()))


def run_level_perplexity(rows: list[dict[str, Any]], merged: str = "at_merge") -> dict[int, float]:
    """Round -> lowest validation perplexity of the models the run holds then (evaluated rounds).

    ``merged`` (``report.merged``): at_merge, a round with a merge holds the
    merged model (its own evaluation, ``val_perplexity_merged`` of the merge
    event) in place of the trainers merged into it, so the merge is credited in
    its round; next_evaluation, the round holds the trainers' evaluations from
    before the merge. A merge event without the merged model's evaluation
    leaves its round's rows as they are.
    """
    by_round: dict[int, dict[int, float]] = {}
    merged_models: dict[int, list[tuple[list[int], float]]] = {}
    for r in rows:
        ppl = finite_or_none(r.get("val_perplexity"))
        if ppl is not None:
            by_round.setdefault(r["round"], {})[r["trainer"]] = ppl
        if merged != "at_merge":
            continue
        for event in r.get("events") or []:
            after = finite_or_none(event.get("val_perplexity_merged"))
            if isinstance(event, dict) and event.get("type") == "merge" and after is not None:
                merged_models.setdefault(r["round"], []).append((list(event["merged"]), after))
    out: dict[int, float] = {}
    for round_, models in by_round.items():
        held = dict(models)
        for ids, after in merged_models.get(round_, []):
            for t in ids:
                held.pop(t, None)
            held[("merged", *ids)] = after
        out[round_] = min(held.values())
    return dict(sorted(out.items()))


@dataclass(frozen=True)
class TargetCrossing:
    """Where a run reaches a target: between evaluated rounds ``before`` and ``round``.

    ``fraction`` places the target between them, linear in log-perplexity
    (1: at ``round``); ``before`` is None when ``round`` is the first evaluation.
    """

    round: int
    before: int | None = None
    fraction: float = 1.0

    def value(self, per_round: dict[int, float]) -> float | None:
        """A cumulative quantity (round -> value at its end) at the crossing."""
        at = per_round.get(self.round)
        if at is None or self.before is None:
            return at
        prev = per_round.get(self.before)
        return at if prev is None else prev + self.fraction * (at - prev)


def crossing(
    rows: list[dict[str, Any]], target: float, rule: ReachRule | str = DEFAULT_RULE
) -> TargetCrossing | None:
    """Where the run reaches ``target`` under ``rule``; None: never (or does not stay)."""
    rule = ReachRule.of(rule)
    curve = run_level_perplexity(rows, rule.merged)
    round_ = _reaching_round(curve, target, rule.reached)
    if round_ is None:
        return None
    earlier = [k for k in curve if k < round_]
    if (
        not earlier
        or rule.between == "round"
        or (rule.between == "model" and rows[0].get("method") not in PER_STEP_SYNC)
    ):
        # A round-based method's global model changes only at its outer step (and
        # merge): the first model at or below the target exists at the round's end.
        return TargetCrossing(round_)
    before = earlier[-1]
    # The evaluation before the reaching one is above the target under both reach rules.
    high, low = math.log(curve[before]), math.log(curve[round_])
    fraction = 1.0 if high <= low else (high - math.log(target)) / (high - low)
    return TargetCrossing(round_, before, min(1.0, max(0.0, fraction)))


def round_to_target(rows: list[dict[str, Any]], target: float, rule: str = "stays") -> int | None:
    """The evaluated round at which the run reaches ``target`` under ``rule``; None: never.

    stays: the first evaluated round from which every later evaluation is at
    or below the target (None when the last evaluation is above it); first:
    the first evaluated round at or below it.
    """
    if rule not in REACH_RULES:
        raise ValueError(f"reach rule must be one of {REACH_RULES}, got {rule!r}")
    return _reaching_round(run_level_perplexity(rows), target, rule)


def _reaching_round(curve: dict[int, float], target: float, rule: str) -> int | None:
    """:func:`round_to_target` on the run-level perplexity curve (round -> perplexity)."""
    if rule == "first":
        return next((k for k, ppl in curve.items() if ppl <= target), None)
    reached = None
    for round_ in reversed(curve):
        if curve[round_] > target:
            break
        reached = round_
    return reached


def reach(
    rows: list[dict[str, Any]], target: float | None, rule: ReachRule | str = DEFAULT_RULE
) -> dict[str, Any] | None:
    """Round, tokens, communications, bytes and simulated time when the run reaches target.

    ``round`` is the evaluated round that reaches it; the quantities are read
    under ``rule.between`` (interpolated from the evaluation before it, or at
    its end).
    """
    if target is None:
        return None
    where = crossing(rows, target, rule)
    if where is None:
        return None
    rule = ReachRule.of(rule)
    out: dict[str, Any] = {"round": where.round}
    for name, key in TO_TARGET.items():
        if name == "communications":
            key = COUNTED_FIELDS[rule.communications]
        out[name] = where.value(round_values(rows, key))
    return out


def optimizer_work(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    """Inner optimizer steps and summed inner learning rate along the run.

    Per round the largest among its trainers (the steps a model of the run
    takes from start to end; trainers of one round run side by side), summed
    over rounds. None when the rows do not log the field.
    """
    out: dict[str, float | None] = {}
    for name, key in (("optimizer_steps", "inner_steps"), ("inner_lr_sum", "inner_lr_sum")):
        per_round = round_values(rows, key)
        out[name] = sum(per_round.values()) if per_round else None
    return out


def merges(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each merge of a run: its round, the trainers merged and kept, their perplexities.

    ``before`` holds the merged trainers' perplexities in the merge round;
    ``after`` the merged model's: evaluated right after the merge
    (``val_perplexity_merged`` of the event, ``after_round`` the merge round),
    or, from runs that did not record it, at the kept trainer's next evaluation.
    """
    seen = set()
    out = []
    by_trainer: dict[int, dict[int, float]] = {}
    for r in rows:
        ppl = finite_or_none(r.get("val_perplexity"))
        if ppl is not None:
            by_trainer.setdefault(r["trainer"], {})[r["round"]] = ppl
    for r in sorted(rows, key=lambda x: (x["round"], x["trainer"])):
        for event in r.get("events") or []:
            if not (isinstance(event, dict) and event.get("type") == "merge"):
                continue
            key = (r["round"], repr(sorted(event.items())))
            if key in seen:
                continue
            seen.add(key)
            kept = event.get("kept", r["trainer"])
            merged = list(event.get("merged") or [])
            later = sorted(k for k in by_trainer.get(kept, {}) if k > r["round"])
            out.append(
                {
                    "round": r["round"],
                    "kept": kept,
                    "merged": merged,
                    "batch": event.get("batch"),
                    "before": {t: by_trainer.get(t, {}).get(r["round"]) for t in merged},
                    **_merged_perplexity(event, r["round"], later, by_trainer.get(kept, {})),
                }
            )
    return out


def _merged_perplexity(
    event: dict[str, Any], merge_round: int, later: list[int], kept: dict[int, float]
) -> dict[str, Any]:
    right_after = finite_or_none(event.get("val_perplexity_merged"))
    if right_after is not None:
        return {"after_round": merge_round, "after": right_after}
    return {"after_round": later[0] if later else None, "after": kept[later[0]] if later else None}


def eval_stderr_pct(rows: list[dict[str, Any]]) -> float | None:
    """Standard error of the final perplexity from the finite validation sample, in percent.

    exp(s.e. of the mean loss) − 1 for the trainer with the lowest final
    perplexity: how much the figure would move on another sample of the same
    size, to compare with its spread over seeds.
    """
    last = max(r["round"] for r in rows)
    scored = [
        (finite_or_none(r.get("val_perplexity")), r.get("val_loss_stderr"))
        for r in rows
        if r["round"] == last
    ]
    scored = [(p, se) for p, se in scored if p is not None and isinstance(se, (int, float))]
    if not scored or not math.isfinite(min(scored)[1]):
        return None
    return 100.0 * math.expm1(min(scored)[1])


def perplexity_at_time(rows: list[dict[str, Any]], time_s: float) -> float | None:
    """Run-level perplexity of the last evaluation at or before simulated time ``time_s``.

    The model a user holds at that time; a run that finished earlier keeps
    its final model. None when the run had not been evaluated yet.
    """
    times = round_values(rows, "sim_time_s")
    held = None
    for round_, ppl in run_level_perplexity(rows).items():
        if times.get(round_, float("inf")) <= time_s * (1 + 1e-12):
            held = ppl
    return held


def summary_rows(
    runs: list[RunSeed], target: float | None, rule: ReachRule | str = DEFAULT_RULE
) -> list[dict[str, Any]]:
    """One row per run and seed: summary.json fields, optimizer work, to the main target."""
    rule = ReachRule.of(rule)
    out = []
    for r in runs:
        reached = reach(r.rows, target, rule)
        row = {"run": r.run, "seed": r.seed, "method": r.method}
        row.update({k: r.summary.get(k) for k in SUMMARY_KEYS})
        row.update(optimizer_work(r.rows))
        row["eval_stderr_pct"] = eval_stderr_pct(r.rows)
        row["target_perplexity"] = target
        row["reach_rule"] = rule.reached
        row["between_rule"] = rule.between
        row["merged_rule"] = rule.merged
        row["communications_rule"] = rule.communications
        row["round_to_target"] = reached["round"] if reached else None
        for name in TO_TARGET:
            row[f"{name}_to_target"] = reached[name] if reached else None
        out.append({k: row.get(k) for k in SUMMARY_COLUMNS})
    return out


CURVE_COLUMNS = [
    "run",
    "seed",
    "method",
    "round",
    "tokens_total",
    "messages_total",
    "communications",
    "bytes_total",
    "sim_time_s",
    "val_perplexity",
]


def curve_rows(runs: list[RunSeed]) -> list[dict[str, Any]]:
    """Run-level validation perplexity at every evaluated round, with the x axes of the figures."""
    out = []
    for rs in runs:
        axes = {key: round_values(rs.rows, key) for key in TO_TARGET.values()}
        for round_, ppl in run_level_perplexity(rs.rows).items():
            row = {"run": rs.run, "seed": rs.seed, "method": rs.method, "round": round_}
            row.update({key: values.get(round_) for key, values in axes.items()})
            row["val_perplexity"] = ppl
            out.append(row)
    return out


# The per-run numbers the page spreads over seeds (its per-run table's columns).
PER_RUN_KEYS = (
    "final_val_perplexity",
    "eval_stderr_pct",
    "tokens_total",
    "messages_total",
    "bytes_total",
    "sim_time_s",
    "optimizer_steps",
    "inner_lr_sum",
    "final_trainers",
)


def per_run_entries(summary: list[dict]) -> list[dict]:
    """Per run: seeds and the spread over seeds of each per-run number."""
    out = []
    for name in dict.fromkeys(r["run"] for r in summary):
        seeds = [r for r in summary if r["run"] == name]
        entry = {"run": name, "seeds": len(seeds)}
        for key in PER_RUN_KEYS:
            values = [r.get(key) for r in seeds]
            entry[key] = Spread.of([float(v) for v in values if isinstance(v, (int, float))])
        out.append(entry)
    return out
