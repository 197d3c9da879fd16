"""How finely each headline run is evaluated, and how exactly that places its crossing.

Part of ``adloco report``. A run's crossing of a target is placed between two
evaluations (:func:`adloco.report.analysis.summary.crossing`), so how far apart the
evaluations are bounds how well the time to a target is known. For each
headline run (:func:`adloco.report.analysis.claims.headline_runs`) this module states

- its largest gap between consecutive evaluations, in tokens and as a share
  of the tokens it trained (its final ``tokens_total``), the evaluations taken
  from the metrics rows (``tokens_total`` at each evaluated round, starting
  from 0: the base model, evaluated before the run); over seeds, the largest;
- whether its model changes only at an outer step (the method has one,
  ``adloco.config.runs.PER_STEP_SYNC`` names those without: ddp) and whether every
  round, so every outer step, is evaluated.

The rule it supports: where the model changes only at an outer step and every
outer step is evaluated, no model between two evaluations exists, so the
crossing under ``report.between: round`` is exact (the first model at or
below the target) and ``interpolated`` estimates a point between two outer
steps; the rules section's table shows every headline comparison under both
(:mod:`adloco.report.analysis.sensitivity`). Where the model changes at every step
(ddp), the crossing lies somewhere in the gap under either rule, so a gap
above ``report.max_eval_gap`` of its tokens is a warning on the answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from adloco.config.runs import PER_STEP_SYNC
from adloco.report.analysis.summary import round_values, run_level_perplexity
from adloco.report.inputs.results import RunSeed


@dataclass(frozen=True)
class SeedSpacing:
    """One seed's evaluations: the largest gap between consecutive ones, and the run's tokens."""

    seed: int
    evaluations: int  # evaluated rounds
    largest_gap_tokens: float  # between consecutive evaluations, the first from 0 tokens
    tokens_total: float  # what the run trained: its final tokens_total
    every_round: bool  # every round of the run is evaluated

    @property
    def largest_gap_share(self) -> float:
        return self.largest_gap_tokens / self.tokens_total if self.tokens_total > 0 else 1.0


def seed_spacing(rows: list[dict[str, Any]], seed: int = 0) -> SeedSpacing:
    """The spacing of one seed's evaluations, from its metrics rows."""
    tokens = round_values(rows, "tokens_total")
    evaluated = [k for k in run_level_perplexity(rows) if k in tokens]
    points = [0.0] + [float(tokens[k]) for k in evaluated]
    gaps = [b - a for a, b in zip(points, points[1:], strict=False)]
    total = float(max(tokens.values())) if tokens else 0.0
    return SeedSpacing(
        seed,
        len(evaluated),
        max(gaps) if gaps else total,
        total,
        bool(evaluated) and set(evaluated) == {r["round"] for r in rows},
    )


def changes_only_at_outer_step(method: str) -> bool:
    """Whether a run of ``method`` changes its model only at the outer step of each round."""
    return method not in PER_STEP_SYNC


@dataclass(frozen=True)
class Spacing:
    """A headline run's evaluation spacing (its widest seed) and the rule it supports."""

    run: str
    method: str
    outer_step_only: bool  # the model changes only at an outer step
    widest: SeedSpacing  # the seed with the largest gap as a share of its tokens
    seeds: int
    max_gap: float  # report.max_eval_gap: the share above which a step-wise run warns

    @property
    def every_outer_step(self) -> bool:
        """The model changes only at an outer step, and every round (outer step) is evaluated."""
        return self.outer_step_only and self.widest.every_round

    @property
    def rule(self) -> str:
        """How exactly the crossing is placed, in words."""
        if self.every_outer_step:
            return (
                "exact under between: round (every outer step is evaluated); interpolated "
                "estimates it between two outer steps"
            )
        if self.outer_step_only:
            return "within the gap under either rule (not every outer step is evaluated)"
        return "within the gap under either rule (the model changes at every step)"

    @property
    def warning(self) -> str:
        """The answer's warning when a step-wise run's evaluations are too far apart ("": none)."""
        w = self.widest
        if self.outer_step_only or w.largest_gap_share <= self.max_gap:
            return ""
        return (
            f"{self.run} ({self.method}) is evaluated up to {w.largest_gap_share:.1%} of its "
            f"tokens apart ({w.largest_gap_tokens:,.0f} of {w.tokens_total:,.0f} tokens, seed "
            f"{w.seed}), above report.max_eval_gap {self.max_gap:.1%}: its model changes at every"
            " step, so where it crosses a target is known only within that gap (a smaller "
            "inner_steps of the run evaluates it more often)."
        )

    def as_dict(self) -> dict[str, Any]:
        w = self.widest
        return {
            "run": self.run,
            "method": self.method,
            "model_changes_only_at_outer_step": self.outer_step_only,
            "every_outer_step_evaluated": self.every_outer_step,
            "seeds": self.seeds,
            "widest_seed": w.seed,
            "evaluations": w.evaluations,
            "largest_gap_tokens": w.largest_gap_tokens,
            "tokens_total": w.tokens_total,
            "largest_gap_share": w.largest_gap_share,
            "max_eval_gap": self.max_gap,
            "rule": self.rule,
            "warning": self.warning or None,
        }


def eval_spacing(runs: list[RunSeed], names: list[str], max_gap: float) -> list[Spacing]:
    """The spacing of each run of ``names`` that has seeds, in that order."""
    out = []
    for name in names:
        mine = sorted((r for r in runs if r.run == name), key=lambda r: r.seed)
        if not mine:
            continue
        per_seed = [seed_spacing(r.rows, r.seed) for r in mine]
        widest = max(per_seed, key=lambda s: s.largest_gap_share)  # the first on a tie
        method = mine[0].method
        out.append(
            Spacing(name, method, changes_only_at_outer_step(method), widest, len(mine), max_gap)
        )
    return out
