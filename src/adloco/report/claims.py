"""The paper's claims, each with a verdict, an effect size and a bootstrap interval over seeds.

Part of ``adloco report``. Three claims of the paper are tested, on the
target ladder (:mod:`adloco.report.ladder`):

1. AdLoCo reaches the target in less simulated time than DiLoCo;
2. AdLoCo reaches the target in fewer communications than DiLoCo;
3. each ablation is worse than full AdLoCo (slower to the target).

Every comparison is a ratio of medians over seeds, AdLoCo / other (below 1:
AdLoCo better), with a percentile-bootstrap interval
(:func:`adloco.report.stats.bootstrap_ratio`). Its verdict: **supported**
when the whole interval is below 1, **not supported** when it is at or
above 1, **inconclusive** when it contains 1 or a run has a single seed, and
**not testable** when a run or a target is missing, neither run reaches the
target in most seeds, or (claim 1) the runs' clock makes time a function of
token count. The headline of claims 1 and 2 is the comparison with DiLoCo at
the main target; the same comparison at every other target, against every
other baseline and against the best baseline of each target is listed beside
it. Claim 3's headline is "supported" when every ablation's is, "not
supported" when any ablation's is, else inconclusive. Mechanism checks are
not claims: :mod:`adloco.report.mechanisms`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from adloco.report.inputs import RunSeed
from adloco.report.ladder import Ladder, to_target
from adloco.report.settings import ReportSettings, Roles
from adloco.report.stats import Interval, bootstrap_difference, bootstrap_ratio, median

SUPPORTED = "supported"
NOT_SUPPORTED = "not supported"
INCONCLUSIVE = "inconclusive"
NOT_TESTABLE = "not testable"
VERDICTS = (SUPPORTED, NOT_SUPPORTED, INCONCLUSIVE, NOT_TESTABLE)

QUANTITY_WORDS = {
    "sim_time_s": "simulated time",
    "communications": "communications",
    "tokens": "tokens",
    "bytes": "bytes",
}


def fmt(value: float | None, digits: int = 4) -> str:
    """A number for prose: thousands separators for counts, 4 significant digits otherwise."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if math.isinf(value):
        return "never"
    if float(value).is_integer() and abs(value) >= 1:
        return f"{int(value):,}"
    return f"{value:.{digits}g}"


def fmt_ratio(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "n/a"
    if math.isinf(value):
        return "∞"
    return f"{value:.3g}"


@dataclass
class Comparison:
    """One test: ``subject`` against ``against`` in ``quantity`` at ``target``."""

    claim: int
    subject: str
    against: str  # a run, or "best baseline" (then ``baseline`` names the best)
    baseline: str
    quantity: str  # a TO_TARGET quantity, or "final_val_perplexity"
    target: float | None
    interval: Interval | None  # ratio (to target) or difference (final perplexity)
    subject_values: list[float]
    against_values: list[float]
    verdict: str
    reason: str
    headline: bool = False

    @property
    def effect_kind(self) -> str:
        return "difference" if self.quantity == "final_val_perplexity" else "ratio"

    def as_dict(self) -> dict[str, Any]:
        def clean(values):
            return [None if math.isinf(v) else v for v in values]

        return {
            "claim": self.claim,
            "subject": self.subject,
            "against": self.against,
            "baseline": self.baseline,
            "quantity": self.quantity,
            "target_perplexity": self.target,
            "effect": self.effect_kind,
            **(
                {f"effect_{k}": v for k, v in self.interval.as_dict().items()}
                if self.interval
                else {}
            ),
            "subject_per_seed": clean(self.subject_values),
            "against_per_seed": clean(self.against_values),
            "verdict": self.verdict,
            "reason": self.reason,
            "headline": self.headline,
        }


@dataclass
class Claim:
    number: int
    statement: str
    verdict: str
    reason: str
    comparisons: list[Comparison] = field(default_factory=list)

    @property
    def headline(self) -> list[Comparison]:
        return [c for c in self.comparisons if c.headline]

    def as_dict(self) -> dict[str, Any]:
        return {
            "number": self.number,
            "statement": self.statement,
            "verdict": self.verdict,
            "reason": self.reason,
            "comparisons": [c.as_dict() for c in self.comparisons],
        }


def _ci_text(i: Interval) -> str:
    pct = f"{round(i.confidence * 100):d} %"
    return f"{pct} CI [{fmt_ratio(i.low)}, {fmt_ratio(i.high)}]"


def judge_ratio(
    interval: Interval, subject: str, other: str, what: str, subject_values, other_values
) -> tuple[str, str]:
    """Verdict and reason for "subject needs less ``what`` than other" from the ratio."""
    ad_reached = sum(math.isfinite(v) for v in subject_values)
    ot_reached = sum(math.isfinite(v) for v in other_values)
    reached = (
        f"{subject} reached it in {ad_reached} of {len(subject_values)} seeds, "
        f"{other} in {ot_reached} of {len(other_values)}"
    )
    if math.isnan(interval.estimate):
        return NOT_TESTABLE, f"neither run reaches the target in most seeds ({reached})"
    if interval.estimate == 0:
        ratio_text = f"{other} does not reach the target in most seeds, {subject} does ({reached})"
    elif math.isinf(interval.estimate):
        ratio_text = f"{subject} does not reach the target in most seeds, {other} does ({reached})"
    else:
        ratio_text = f"{subject} needs {fmt_ratio(interval.estimate)}× the {what} of {other}"
    if interval.low is None:
        return (
            INCONCLUSIVE,
            f"{ratio_text}, but with a single seed there is no spread over seeds to judge the "
            "difference by",
        )
    if math.isnan(interval.low):
        return INCONCLUSIVE, f"{ratio_text}; the bootstrap could not bound it ({reached})"
    ci = _ci_text(interval)
    if interval.high < 1:
        return SUPPORTED, f"{ratio_text} ({ci}, below 1)"
    if interval.low >= 1:
        return NOT_SUPPORTED, f"{ratio_text} ({ci}, not below 1)"
    return INCONCLUSIVE, f"{ratio_text}, but the {ci} contains 1"


def compare(
    number: int,
    runs: list[RunSeed],
    subject: str,
    against: list[str],
    label: str,
    quantity: str,
    target: float,
    settings: ReportSettings,
    headline: bool = False,
    untestable: str = "",
) -> Comparison:
    """``subject`` against the best (lowest median) of ``against`` in ``quantity`` to target."""
    mine = to_target(runs, subject, target, quantity)
    theirs = {n: to_target(runs, n, target, quantity) for n in against}
    best = min(against, key=lambda n: median(theirs[n]))
    interval = bootstrap_ratio(
        mine,
        list(theirs.values()),
        settings.bootstrap_samples,
        settings.bootstrap_seed,
        settings.confidence,
    )
    if untestable:
        verdict, reason = NOT_TESTABLE, untestable
    else:
        verdict, reason = judge_ratio(
            interval,
            subject,
            best if len(against) == 1 else f"the best baseline ({best})",
            QUANTITY_WORDS[quantity],
            mine,
            theirs[best],
        )
    return Comparison(
        number,
        subject,
        label,
        best,
        quantity,
        target,
        interval,
        mine,
        theirs[best],
        verdict,
        reason,
        headline,
    )


def _final_values(runs: list[RunSeed], name: str) -> list[float]:
    out = []
    for r in sorted((r for r in runs if r.run == name), key=lambda r: r.seed):
        v = r.summary.get("final_val_perplexity")
        out.append(float(v) if isinstance(v, (int, float)) else math.nan)
    return out


def compare_final(
    runs: list[RunSeed], full: str, ablation: str, settings: ReportSettings
) -> Comparison:
    """Final perplexity at the equal token budget: ablation − full (above 0: ablation worse)."""
    a, f = _final_values(runs, ablation), _final_values(runs, full)
    if any(math.isnan(v) for v in a + f):
        return Comparison(
            3, full, ablation, ablation, "final_val_perplexity", None, None, f, a,
            NOT_TESTABLE, "a seed has no final perplexity",
        )  # fmt: skip
    interval = bootstrap_difference(
        a, f, settings.bootstrap_samples, settings.bootstrap_seed, settings.confidence
    )
    text = (
        f"{ablation} ends {fmt(abs(interval.estimate))} perplexity "
        f"{'above' if interval.estimate >= 0 else 'below'} {full} at the same token budget"
    )
    if interval.low is None:
        verdict, reason = INCONCLUSIVE, f"{text}, but with a single seed there is no spread"
    elif interval.low > 0:
        verdict, reason = SUPPORTED, f"{text} ({_ci_text(interval)}, above 0)"
    elif interval.high <= 0:
        verdict, reason = NOT_SUPPORTED, f"{text} ({_ci_text(interval)}, not above 0)"
    else:
        verdict, reason = INCONCLUSIVE, f"{text}, but the {_ci_text(interval)} contains 0"
    return Comparison(
        3, full, ablation, ablation, "final_val_perplexity", None, interval, f, a, verdict, reason
    )


def _missing(roles: Roles, ladder: Ladder, need_diloco: bool = True) -> str:
    if roles.adloco is None:
        return "no AdLoCo run is configured (report.adloco, or a run of method adloco)"
    if need_diloco and roles.diloco is None:
        return "no DiLoCo run is configured (report.diloco, or a run of method diloco)"
    if ladder.main is None:
        return ladder.note
    return ""


def to_target_claim(
    number: int,
    quantity: str,
    runs: list[RunSeed],
    roles: Roles,
    ladder: Ladder,
    settings: ReportSettings,
    clock_reason: str = "",
) -> Claim:
    what = QUANTITY_WORDS[quantity]
    statement = (
        f"AdLoCo reaches the target perplexity in {'less' if quantity == 'sim_time_s' else 'fewer'}"
        f" {what} than DiLoCo."
    )
    missing = _missing(roles, ladder)
    if missing:
        return Claim(number, statement, NOT_TESTABLE, missing)
    comparisons = []
    for target in sorted(ladder.targets, key=lambda t: (t != ladder.main, -t)):
        main = target == ladder.main
        comparisons.append(
            compare(
                number,
                runs,
                roles.adloco,
                [roles.diloco],
                roles.diloco,
                quantity,
                target,
                settings,
                headline=main,
                untestable=clock_reason,
            )  # fmt: skip
        )
        if main:
            for other in roles.baselines:
                comparisons.append(
                    compare(
                        number,
                        runs,
                        roles.adloco,
                        [other],
                        other,
                        quantity,
                        target,
                        settings,
                        untestable=clock_reason,
                    )  # fmt: skip
                )
        if roles.baselines:
            comparisons.append(
                compare(
                    number,
                    runs,
                    roles.adloco,
                    roles.all_baselines(),
                    "best baseline",
                    quantity,
                    target,
                    settings,
                    untestable=clock_reason,
                )  # fmt: skip
            )
    head = comparisons[0]
    reason = f"At the main target {fmt(ladder.main)}: {head.reason}."
    return Claim(number, statement, head.verdict, reason, comparisons)


def ablation_claim(
    runs: list[RunSeed], roles: Roles, ladder: Ladder, settings: ReportSettings, clock_reason: str
) -> Claim:
    statement = (
        "Each ablation is worse than full AdLoCo: it needs more simulated time to reach the "
        "target (and, shown beside, ends at a higher perplexity at the same token budget)."
    )
    missing = _missing(roles, ladder, need_diloco=False)
    if missing:
        return Claim(3, statement, NOT_TESTABLE, missing)
    if not roles.ablations:
        return Claim(3, statement, NOT_TESTABLE, "no ablation runs are configured")
    comparisons = []
    for ablation in roles.ablations:
        comparisons.append(
            compare(
                3,
                runs,
                roles.adloco,
                [ablation],
                ablation,
                "sim_time_s",
                ladder.main,
                settings,
                headline=True,
                untestable=clock_reason,
            )  # fmt: skip
        )
        comparisons.append(compare_final(runs, roles.adloco, ablation, settings))
    heads = [c.verdict for c in comparisons if c.headline]
    if all(v == SUPPORTED for v in heads):
        verdict = SUPPORTED
    elif any(v == NOT_SUPPORTED for v in heads):
        verdict = NOT_SUPPORTED
    elif all(v == NOT_TESTABLE for v in heads):
        verdict = NOT_TESTABLE
    else:
        verdict = INCONCLUSIVE
    counts = ", ".join(f"{heads.count(v)} {v}" for v in VERDICTS if heads.count(v))
    reason = f"Time to the main target {fmt(ladder.main)}, {len(heads)} ablations: {counts}."
    return Claim(3, statement, verdict, reason, comparisons)


def evaluate_claims(
    runs: list[RunSeed],
    roles: Roles,
    ladder: Ladder,
    settings: ReportSettings,
    clock_reason: str = "",
) -> list[Claim]:
    """Claims 1–3. ``clock_reason``: why simulated time cannot test the claims (else empty)."""
    return [
        to_target_claim(1, "sim_time_s", runs, roles, ladder, settings, clock_reason),
        to_target_claim(2, "communications", runs, roles, ladder, settings),
        ablation_claim(runs, roles, ladder, settings, clock_reason),
    ]
