"""The paper's claims, each with a verdict from an exact test over seeds paired by seed.

Part of ``adloco report``. Three claims of the paper are tested at the
targets of :mod:`adloco.report.analysis.targets`:

1. AdLoCo reaches the target in less simulated time than DiLoCo;
2. AdLoCo reaches the target in fewer communications than DiLoCo: network
   messages by default (``report.communications``), with bytes beside them;
3. each ablation is worse than full AdLoCo (slower to the target).

A comparison takes each seed both runs have (``report.pairing: seed``), the
per-seed ratio AdLoCo / other (below 1: AdLoCo better) and applies the exact
sign-flip test of the log ratios (:func:`adloco.report.analysis.exact_tests.sign_flip_test`;
``report.paired_test`` names its statistic). The effect is the median paired
ratio, with the order-statistic interval of that median and its exact
coverage. A seed that never reaches the target (or does not stay there,
``report.reached``) is censored: its log ratio is ±inf and takes the largest
rank; a seed where both are censored is a tie. Paired by seed, the
equivalence test (TOST) asks whether the ratio lies within the smallest
effect of interest (``report.smallest_effect``); both-censored seeds say
nothing about the size of a difference and are left out of it. The verdict
follows the order of precedence of :mod:`adloco.report.analysis.verdict`: **not
testable** (also when a run or a target is missing, the target is at or
above the validation unigram perplexity, or, for claims 1 and 3's time, the
runs' clock makes time a function of token count), **no meaningful
difference** when equivalence is shown, **supported**, **not supported**,
**inconclusive**. Each paired comparison also carries its power at the
smallest effect of interest and the seeds it would need
(:mod:`adloco.report.analysis.power`); a claim warns when a comparison it rests on
falls short (:func:`adloco.report.analysis.power.power_warnings`).

Beside the headline (against DiLoCo at the main target): every other
baseline, the best baseline (lowest median, chosen on these data) at every
target, the ddp anchor, and perplexity at equal simulated time
(:mod:`adloco.report.analysis.equal_time`). Mechanism checks are not claims:
:mod:`adloco.report.analysis.mechanisms`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from adloco.report.analysis.equal_time import equal_time_s, perplexities_at
from adloco.report.analysis.exact_tests import (
    EquivalenceTest,
    OrderInterval,
    SignFlipTest,
    TwoSampleTest,
    equivalence_test,
    log_ratio,
    median_interval,
    median_of,
    sign_flip_test,
    two_sample_test,
)
from adloco.report.analysis.ladder import to_target
from adloco.report.analysis.power import Power, attach_power, rests_on
from adloco.report.analysis.seed_stats import median, ratio
from adloco.report.analysis.targets import Ladder
from adloco.report.analysis.verdict import COUNTED_WORDS, quantity_words
from adloco.report.analysis.verdict import INCONCLUSIVE as INCONCLUSIVE
from adloco.report.analysis.verdict import NO_DIFFERENCE as NO_DIFFERENCE
from adloco.report.analysis.verdict import NOT_SUPPORTED as NOT_SUPPORTED
from adloco.report.analysis.verdict import NOT_TESTABLE as NOT_TESTABLE
from adloco.report.analysis.verdict import PERPLEXITY_QUANTITIES as PERPLEXITY_QUANTITIES
from adloco.report.analysis.verdict import QUANTITY_WORDS as QUANTITY_WORDS
from adloco.report.analysis.verdict import SUPPORTED as SUPPORTED
from adloco.report.analysis.verdict import VERDICTS as VERDICTS
from adloco.report.analysis.verdict import fmt as fmt
from adloco.report.analysis.verdict import fmt_p as fmt_p
from adloco.report.analysis.verdict import fmt_ratio as fmt_ratio
from adloco.report.analysis.verdict import judge as judge
from adloco.report.inputs.results import RunSeed
from adloco.report.settings import ReportSettings, Roles, changed_settings


@dataclass(frozen=True)
class Effect:
    """A comparison's numbers: the effect, its interval and the exact test."""

    pairing: str  # seed or none
    seeds: tuple[int, ...]  # the seeds compared (paired: those both runs have)
    ratios: tuple[float, ...]  # per paired seed, subject / other (inf / inf: 1, a tie)
    estimate: float  # median paired ratio, or ratio of medians (pairing none)
    interval: OrderInterval | None  # of the median paired ratio (pairing seed)
    test: SignFlipTest | TwoSampleTest
    both_censored: int  # paired seeds where neither run has a value
    logs: tuple[float, ...] = ()  # per paired seed, log(subject / other), ±inf censored
    margin: float = math.nan  # log(1 + report.smallest_effect); NaN: no equivalence test
    censored: tuple[bool, ...] = ()  # per paired seed: both runs censored

    @cached_property
    def equivalence(self) -> EquivalenceTest | None:
        """TOST against ±margin of the log ratios, both-censored seeds left out (paired only)."""
        if self.pairing != "seed" or math.isnan(self.margin):
            return None
        known = [v for v, c in zip(self.logs, self.censored, strict=True) if not c]
        return equivalence_test(known, self.margin, self.test.statistic)

    def as_dict(self) -> dict[str, Any]:
        def clean(v):
            return None if math.isnan(v) else (str(v) if math.isinf(v) else v)

        eq = self.equivalence
        return {
            "pairing": self.pairing,
            "seeds": list(self.seeds),
            "estimate": clean(self.estimate),
            "interval": self.interval.as_dict() if self.interval else None,
            **self.test.as_dict(),
            "both_censored": self.both_censored,
            "equivalence": {"test": "two one-sided exact sign-flip tests", **eq.as_dict()}
            if eq
            else None,
        }


def measure(subject: dict[int, float], other: dict[int, float], settings: ReportSettings) -> Effect:
    """The effect of ``subject`` against ``other`` (seed -> value; inf censored, NaN absent)."""
    subject = {s: v for s, v in subject.items() if not math.isnan(v)}
    other = {s: v for s, v in other.items() if not math.isnan(v)}
    if settings.section.pairing == "none":
        estimate = ratio(median(list(subject.values())), median(list(other.values())))
        test = two_sample_test(list(subject.values()), list(other.values()))
        both = int(math.isinf(median(list(subject.values())))) * int(
            math.isinf(median(list(other.values())))
        )
        seeds = tuple(sorted(set(subject) | set(other)))
        return Effect("none", seeds, (), estimate, None, test, both)
    seeds = tuple(sorted(set(subject) & set(other)))
    logs = [log_ratio(subject[s], other[s]) for s in seeds]
    ratios = tuple(math.exp(v) for v in logs)
    censored = tuple(math.isinf(subject[s]) and math.isinf(other[s]) for s in seeds)
    return Effect(
        "seed",
        seeds,
        ratios,
        math.exp(median_of(logs)) if seeds else math.nan,
        median_interval(list(ratios), settings.section.confidence),
        sign_flip_test(logs, settings.section.paired_test),
        sum(censored),
        tuple(logs),
        math.log1p(settings.section.smallest_effect),
        censored,
    )


@dataclass
class Comparison:
    """One test: ``subject`` against ``against`` in ``quantity`` (at ``target``)."""

    claim: int
    subject: str
    against: str  # a run, "best baseline" (``baseline`` names it) or "ddp anchor"
    baseline: str
    quantity: str  # a TO_TARGET quantity, final_val_perplexity or perplexity_at_time
    target: float | None
    subject_values: dict[int, float]  # seed -> value (inf: censored, NaN: none)
    against_values: dict[int, float]
    effect: Effect | None
    verdict: str
    reason: str
    headline: bool = False
    time_s: float | None = None  # perplexity_at_time: the equal simulated time
    alternatives: dict[str, dict[str, str]] = field(default_factory=dict)  # rule -> value, verdict
    power: Power | None = None  # paired comparisons in time or communications
    beside: bool = False  # said on the first screen beside the claim's headline
    words: str = ""  # the quantity in words (communications: as report.communications counts)

    def key(self) -> tuple:
        """What identifies the comparison across rule settings."""
        return (self.claim, self.against, self.quantity, self.target)

    def as_dict(self) -> dict[str, Any]:
        def clean(v):
            return None if v is None or math.isnan(v) or math.isinf(v) else v

        seeds = sorted(set(self.subject_values) | set(self.against_values))
        per_seed = []
        for s in seeds:
            a, b = self.subject_values.get(s), self.against_values.get(s)
            row = {"seed": s, "subject": clean(a), "against": clean(b)}
            row["subject_censored"] = a is not None and math.isinf(a)
            row["against_censored"] = b is not None and math.isinf(b)
            if self.effect and self.effect.pairing == "seed" and s in self.effect.seeds:
                r = self.effect.ratios[self.effect.seeds.index(s)]
                row["ratio"] = str(r) if math.isinf(r) else r
            per_seed.append(row)
        return {
            "claim": self.claim,
            "subject": self.subject,
            "against": self.against,
            "baseline": self.baseline,
            "quantity": self.quantity,
            "target_perplexity": self.target,
            "equal_time_s": self.time_s,
            "effect": "ratio",
            **({"effect_" + k: v for k, v in self.effect.as_dict().items()} if self.effect else {}),
            "per_seed": per_seed,
            "subject_per_seed": [clean(self.subject_values.get(s)) for s in seeds],
            "against_per_seed": [clean(self.against_values.get(s)) for s in seeds],
            "verdict": self.verdict,
            "reason": self.reason,
            "headline": self.headline,
            "under_alternative_rules": self.alternatives,
            "power": self.power.as_dict() if self.power else None,
        }


@dataclass
class Claim:
    number: int
    statement: str
    verdict: str
    reason: str
    comparisons: list[Comparison] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # comparisons it rests on that fall short
    decides: str = ""  # one sentence: which setting decides the verdict (claim 1's paper path)

    @property
    def headline(self) -> list[Comparison]:
        return [c for c in self.comparisons if c.headline]

    def as_dict(self) -> dict[str, Any]:
        return {
            "number": self.number,
            "statement": self.statement,
            "verdict": self.verdict,
            "reason": self.reason,
            # claim_rests_on: the comparisons the verdict rests on, whose power the
            # page warns about (scripts/seed-count.py sizes the seeds from them).
            "comparisons": [
                {**c.as_dict(), "claim_rests_on": rests_on(self, c)} for c in self.comparisons
            ],
            "warnings": self.warnings,
        }


def _counts(subject: str, other: str, a: dict[int, float], b: dict[int, float]) -> str:
    def got(values):
        return sum(math.isfinite(v) for v in values.values())

    return f"{subject} reached it in {got(a)} of {len(a)} seeds, {other} in {got(b)} of {len(b)}"


def _join(*reasons: str) -> str:
    return "; ".join(r for r in reasons if r)


@dataclass(frozen=True)
class Context:
    """What every comparison of one evaluation shares."""

    runs: list[RunSeed]
    roles: Roles
    ladder: Ladder
    settings: ReportSettings
    clock_reason: str  # why simulated time cannot test a claim (else "")


def values_of(ctx: Context, name: str, quantity: str, target: float | None, time_s=None):
    if quantity == "perplexity_at_time":
        return perplexities_at(ctx.runs, name, time_s)
    if quantity == "final_val_perplexity":
        out = {}
        for r in sorted((r for r in ctx.runs if r.run == name), key=lambda r: r.seed):
            v = r.summary.get("final_val_perplexity")
            out[r.seed] = float(v) if isinstance(v, (int, float)) else math.nan
        return out
    return to_target(ctx.runs, name, target, quantity, ctx.settings.reach_rule)


def best_of(ctx: Context, names: list[str], quantity: str, target: float | None, time_s=None):
    """The run of ``names`` with the lowest median (first in order on a tie)."""

    def middle(name: str) -> float:
        values = values_of(ctx, name, quantity, target, time_s).values()
        return median([v for v in values if not math.isnan(v)])

    return min(names, key=middle)


def compare(
    ctx: Context,
    number: int,
    against: list[str],
    label: str,
    quantity: str,
    target: float | None,
    headline: bool = False,
    time_s: float | None = None,
    subject: str | None = None,
) -> Comparison:
    """``subject`` (AdLoCo) against the best (lowest median) of ``against``."""
    subject = subject or ctx.roles.adloco
    best = best_of(ctx, against, quantity, target, time_s) if len(against) > 1 else against[0]
    mine = values_of(ctx, subject, quantity, target, time_s)
    theirs = values_of(ctx, best, quantity, target, time_s)
    effect = measure(mine, theirs, ctx.settings)
    if quantity in PERPLEXITY_QUANTITIES:  # the margin is one of time and communications
        effect = replace(effect, margin=math.nan)
    untestable = []
    if quantity in ("sim_time_s", "perplexity_at_time"):
        untestable.append(ctx.clock_reason)
    if target is not None:
        untestable.append(ctx.ladder.untestable.get(target, ""))
    name = best if len(against) == 1 else f"the best baseline ({best})"
    if any(untestable):
        verdict, reason = NOT_TESTABLE, _join(*untestable)
    else:
        what = quantity_words(quantity, ctx.settings.section.communications)
        counts = _counts(subject, best, mine, theirs) if target is not None else ""
        verdict, reason = judge(effect, subject, name, what, ctx.settings, counts)
        if target is not None:
            reason = _join(reason, ctx.ladder.caveat)
    return Comparison(
        number, subject, label, best, quantity, target, mine, theirs, effect, verdict, reason,
        headline, time_s, words=quantity_words(quantity, ctx.settings.section.communications),
    )  # fmt: skip


def headline_runs(ctx: Context) -> list[str]:
    """AdLoCo, DiLoCo, the best baseline in time to the main target, the ddp anchor."""
    roles = ctx.roles
    names = [n for n in (roles.adloco, roles.diloco) if n]
    if roles.all_baselines() and ctx.ladder.main is not None:
        best = best_of(ctx, roles.all_baselines(), "sim_time_s", ctx.ladder.main)
        if best not in names:
            names.append(best)
    if roles.ddp:
        names.append(roles.ddp)
    return names


def _missing(roles: Roles, ladder: Ladder, need_diloco: bool = True) -> str:
    if roles.adloco is None:
        return "no AdLoCo run is configured (report.adloco, or a run of method adloco)"
    if need_diloco and roles.diloco is None:
        return "no DiLoCo run is configured (report.diloco, or a run of method diloco)"
    if ladder.main is None:
        return ladder.note
    return ""


def to_target_claim(ctx: Context, number: int, quantity: str) -> Claim:
    roles, ladder = ctx.roles, ctx.ladder
    what = quantity_words(quantity, ctx.settings.section.communications)
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
            compare(ctx, number, [roles.diloco], roles.diloco, quantity, target, headline=main)
        )
        if main:
            for other in roles.baselines:
                comparisons.append(compare(ctx, number, [other], other, quantity, target))
        if roles.baselines:
            comparisons.append(
                compare(ctx, number, roles.all_baselines(), "best baseline", quantity, target)
            )
        if main and roles.ddp:
            comparisons.append(compare(ctx, number, [roles.ddp], "ddp anchor", quantity, target))
    if quantity == "sim_time_s":
        comparisons.extend(equal_time_comparisons(ctx, number))
    head = comparisons[0]
    reason = f"At the main target {fmt(ladder.main)}: {head.reason}."
    decides = ""
    if quantity == "sim_time_s" and roles.paper:
        path = paper_path(ctx, number)
        comparisons += path
        reason += " " + paper_sentence(ctx, path[-1])
        decides = decides_sentence(ctx, head, path)
        reason += " " + decides
    if quantity == "communications":
        # Claim 2 in bytes beside its messages: a merge is one message of a whole model; and
        # in the paper's count (a trainer's round, whether or not it sends a byte).
        for other in ("bytes", "trainer_rounds"):
            beside = compare(ctx, number, [roles.diloco], roles.diloco, other, ladder.main)
            # Counted by the headline already when report.communications is the paper's count.
            beside.beside = ctx.settings.section.communications != other
            beside.words = COUNTED_WORDS.get(other, beside.words)
            comparisons.append(beside)
            reason += f" In {beside.words} ({beside.verdict}): {beside.reason}."
    return Claim(number, statement, head.verdict, reason, comparisons, decides=decides)


PAPER = "diloco, the paper's AdLoCo"  # the label of claim 1 for the paper's configuration


def paper_comparison(ctx: Context, number: int, subject: str | None = None) -> Comparison:
    """The paper's AdLoCo configuration (or a step towards it) against DiLoCo at the main
    target, in time."""
    roles = ctx.roles
    subject = subject or roles.paper
    label = PAPER if subject == roles.paper else f"diloco, {subject}"
    out = compare(ctx, number, [roles.diloco], label, "sim_time_s", ctx.ladder.main,
                  subject=subject)  # fmt: skip
    out.beside = True
    return out


def path_runs(ctx: Context) -> list[str]:
    """The AdLoCo variants between the tuned run and the paper's configuration: each differs
    from the tuned run in some of the settings that tell the paper's run from it, set as the
    paper's run sets them, fewest first; then the paper's run."""
    runs = {r.run: r.settings for r in ctx.runs}
    tuned, paper = runs[ctx.roles.adloco], runs[ctx.roles.paper]
    apart = set(changed_settings(paper, tuned))
    steps = []
    for name in ctx.roles.variants:
        if name not in runs:
            continue
        changed = set(changed_settings(runs[name], tuned))
        if (
            changed
            and changed < apart
            and all(getattr(runs[name], k) == getattr(paper, k) for k in changed)
        ):
            steps.append((len(changed), name))
    return [name for _, name in sorted(steps)] + [ctx.roles.paper]


def paper_path(ctx: Context, number: int) -> list[Comparison]:
    """Claim 1 for each run of :func:`path_runs`, the paper's configuration last."""
    return [paper_comparison(ctx, number, name) for name in path_runs(ctx)]


def _apart(ctx: Context, a: str, b: str) -> list[str]:
    runs = {r.run: r.settings for r in ctx.runs}
    return changed_settings(runs[a], runs[b])


def _settings_words(ctx: Context, keys: list[str], run: str) -> str:
    settings = next(r.settings for r in ctx.runs if r.run == run)
    return ", ".join(f"{k} {getattr(settings, k)}" for k in keys) or "no setting"


def paper_sentence(ctx: Context, paper: Comparison) -> str:
    """Claim 1 for the paper's configuration, and the settings that tell it from the tuned
    run."""
    runs = {r.run: r.settings for r in ctx.runs}
    mine, theirs = runs[ctx.roles.paper], runs[ctx.roles.adloco]
    differ = ", ".join(
        f"{k} {getattr(theirs, k)} against {getattr(mine, k)}"
        for k in changed_settings(mine, theirs)
    )
    return (
        f"In the paper's configuration ({ctx.roles.paper}): {paper.verdict} ({paper.reason}). "
        f"The tuned run differs from it in {differ or 'no setting'}."
    )


def decides_sentence(ctx: Context, tuned: Comparison, path: list[Comparison]) -> str:
    """One sentence: claim 1's verdict at each step from the tuned run to the paper's
    configuration (each step a run of :func:`path_runs`, named by the settings it changes),
    and the step whose settings change it."""
    steps = [(ctx.roles.adloco, tuned), *((c.subject, c) for c in path)]
    walk, turns = [f"tuned {ctx.roles.adloco}: {tuned.verdict}"], []
    for (before, was), (name, now) in zip(steps, steps[1:], strict=False):
        changed = _settings_words(ctx, _apart(ctx, name, before), name)
        walk.append(f"{changed} ({name}): {now.verdict}")
        if now.verdict != was.verdict:
            turns.append(changed)
    if not turns:
        end = "no step changes the verdict"
    elif len(turns) == 1:
        end = f"{turns[0]} decides it"
    else:
        end = f"each of {'; '.join(turns)} changes it"
    return f"Towards the paper's configuration: {'; then '.join(walk)}; so {end}."


def equal_time_comparisons(ctx: Context, number: int) -> list[Comparison]:
    """Perplexity at the equal simulated time, against DiLoCo, the best baseline and ddp."""
    roles = ctx.roles
    time_s = equal_time_s(ctx.runs, headline_runs(ctx), ctx.settings.section.equal_time)
    if time_s is None:
        return []
    out = [
        compare(ctx, number, [roles.diloco], roles.diloco, "perplexity_at_time", None,
                time_s=time_s)
    ]  # fmt: skip
    if roles.baselines:
        out.append(
            compare(ctx, number, roles.all_baselines(), "best baseline", "perplexity_at_time",
                    None, time_s=time_s)
        )  # fmt: skip
    if roles.ddp:
        out.append(
            compare(ctx, number, [roles.ddp], "ddp anchor", "perplexity_at_time", None,
                    time_s=time_s)
        )  # fmt: skip
    return out


def ablation_claim(ctx: Context) -> Claim:
    roles, ladder = ctx.roles, ctx.ladder
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
            compare(ctx, 3, [ablation], ablation, "sim_time_s", ladder.main, headline=True)
        )
        comparisons.append(compare(ctx, 3, [ablation], ablation, "final_val_perplexity", None))
    heads = [c.verdict for c in comparisons if c.headline]
    if all(v == SUPPORTED for v in heads):
        verdict = SUPPORTED
    elif any(v == NOT_SUPPORTED for v in heads):
        verdict = NOT_SUPPORTED
    elif any(v == NO_DIFFERENCE for v in heads):  # an ablation that does not matter
        verdict = NO_DIFFERENCE
    elif all(v == NOT_TESTABLE for v in heads):
        verdict = NOT_TESTABLE
    else:
        verdict = INCONCLUSIVE
    counts = ", ".join(f"{heads.count(v)} {v}" for v in VERDICTS if heads.count(v))
    reason = f"Time to the main target {fmt(ladder.main)}, {len(heads)} ablations: {counts}."
    for c in multi_instance(ctx):
        comparisons.append(c)
        reason += (
            f" Multi-instance training, which the tuned run turns off, beside them: {c.subject} "
            f"(its initial trainers) against {roles.adloco}: {c.verdict} ({c.reason})."
        )
    return Claim(3, statement, verdict, reason, comparisons)


def multi_instance(ctx: Context) -> list[Comparison]:
    """Multi-instance training as an ablation, where the tuned run turns it off: each step
    to the paper's configuration that changes the initial trainers alone, as the full run,
    against the tuned run without it (shown beside claim 3's verdict)."""
    roles = ctx.roles
    if not roles.paper or ctx.ladder.main is None:
        return []
    out = []
    for name in path_runs(ctx)[:-1]:
        if _apart(ctx, name, roles.adloco) == ["initial_trainers"]:
            c = compare(ctx, 3, [roles.adloco], roles.adloco, "sim_time_s", ctx.ladder.main,
                        subject=name)  # fmt: skip
            c.beside = True
            out.append(c)
    return out


def evaluate_claims(
    runs: list[RunSeed],
    roles: Roles,
    ladder: Ladder,
    settings: ReportSettings,
    clock_reason: str = "",
    power: bool = True,
) -> list[Claim]:
    """Claims 1–3. ``clock_reason``: why simulated time cannot test the claims (else empty);
    ``power``: attach each comparison's power and the claims' warnings (not needed for the
    verdicts under other rules)."""
    ctx = Context(runs, roles, ladder, settings, clock_reason)
    claims = [
        to_target_claim(ctx, 1, "sim_time_s"),
        to_target_claim(ctx, 2, "communications"),
        ablation_claim(ctx),
    ]
    if power:
        attach_power(claims, settings)
    return claims


def tokens_to_target(
    runs: list[RunSeed], roles: Roles, ladder: Ladder, settings: ReportSettings
) -> Comparison | None:
    """Claim 1 in tokens to the main target: AdLoCo against DiLoCo, no clock in it.

    The median paired ratio of tokens, judged as the claims judge time
    (:func:`compare` with quantity ``tokens``): what no
    device or network changes. None without AdLoCo, DiLoCo or a main target.
    """
    if roles.adloco is None or roles.diloco is None or ladder.main is None:
        return None
    ctx = Context(runs, roles, ladder, settings, "")
    return compare(ctx, 1, [roles.diloco], roles.diloco, "tokens", ladder.main, headline=True)
