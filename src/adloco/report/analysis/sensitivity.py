"""How the verdicts depend on the stated rules: each headline verdict under the other choice.

Part of ``adloco report``. Five design choices could change a verdict, so
each is a configurable rule of ``report:`` (:data:`adloco.report.settings.RULES`):
when a run reaches a target (``reached``: stays / first), how its values then
are read (``between``: interpolated / round), whether seeds are
paired (``pairing``: seed / none), the statistic of the exact test
(``paired_test``: signed_rank / sign) and the equal-time rule
(``equal_time``: fastest / slowest). This module evaluates the claims again
with one rule switched to its alternative at a time and records, on every
comparison, the verdict it gets then (``Comparison.alternatives``), so the
page and ``claims.json`` show whether a verdict rests on a choice.
"""

from __future__ import annotations

from adloco.report.analysis.claims import Claim, evaluate_claims
from adloco.report.analysis.targets import Ladder
from adloco.report.inputs.results import RunSeed
from adloco.report.settings import RULES, ReportSettings, Roles, other_choice


def attach_alternatives(
    claims: list[Claim],
    runs: list[RunSeed],
    roles: Roles,
    ladder: Ladder,
    settings: ReportSettings,
    clock_reason: str = "",
) -> None:
    """Fill each comparison's ``alternatives``: rule -> {value, verdict} under the other choice."""
    mine = {c.key(): c for claim in claims for c in claim.comparisons}
    for rule in RULES:
        value = other_choice(rule, getattr(settings.section, rule))
        changed = settings.with_rule(rule, value)
        for claim in evaluate_claims(runs, roles, ladder, changed, clock_reason, power=False):
            for c in claim.comparisons:
                if c.key() in mine:
                    mine[c.key()].alternatives[rule] = {"value": value, "verdict": c.verdict}
