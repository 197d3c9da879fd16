"""The paper's claims, each checked against the numbers of these runs.

Part of ``adloco report``: given the runs, their roles (DiLoCo baseline, full
AdLoCo, ablations; :func:`adloco.report.summary.assign_roles`) and the target
perplexity, each claim gets a verdict computed from the data: "supported",
"not supported", or "not testable here" with the reason. With several seeds
the verdict compares means over seeds and the text says how many seeds agree.
A seed that never reaches the target counts as infinitely late, so a mean
over seeds is finite only when every seed reached it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from statistics import fmean
from typing import Any

from adloco.records import finite_or_none
from adloco.report.inputs import RunSeed
from adloco.report.summary import Roles, Target, time_to_target

SUPPORTED = "supported"
NOT_SUPPORTED = "not supported"
NOT_TESTABLE = "not testable"


@dataclass
class Claim:
    number: int
    statement: str
    verdict: str
    details: list[str] = field(default_factory=list)
    why: str = ""  # the reason a claim is not testable
    seeds_agree: int | None = None
    seeds: int | None = None

    @property
    def verdict_text(self) -> str:
        return f"{NOT_TESTABLE} here ({self.why})" if self.verdict == NOT_TESTABLE else self.verdict

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "verdict_text": self.verdict_text}


def fmt(value: float | None, digits: int = 4) -> str:
    """A number for prose: thousands separators for counts, 4 significant digits otherwise."""
    if value is None:
        return "n/a"
    if math.isinf(value):
        return "never"
    if float(value).is_integer() and abs(value) >= 1:
        return f"{int(value):,}"
    return f"{value:.{digits}g}"


def _seeds(runs: list[RunSeed], name: str | None) -> dict[int, RunSeed]:
    return {r.seed: r for r in runs if r.run == name}


def _mean(values: list[float]) -> float:
    return math.inf if any(math.isinf(v) for v in values) else fmean(values)


def _to_target(run: RunSeed, target: float, key: str) -> float:
    reached = time_to_target(run.rows, target)
    return math.inf if reached is None else float(reached[key])


def _agree_text(agree: int, total: int) -> str:
    if total == 1:
        return "the one seed agrees" if agree else "the one seed does not agree"
    return f"{agree} of {total} seeds agree"


def _plural(count: float, word: str) -> str:
    return f"{fmt(count)} {word}{'' if count == 1 else 's'}"


def _not_testable(number: int, statement: str, why: str) -> Claim:
    return Claim(number, statement, NOT_TESTABLE, why=why)


def _needs(roles: Roles, target: Target | None = None, diloco: bool = False) -> str | None:
    """Why a claim cannot be tested: a missing run, or a missing target when one is needed."""
    if roles.adloco is None:
        return "no run of method adloco is configured"
    if diloco and roles.diloco is None:
        return "no run of method diloco is configured"
    if target is not None and target.value is None:
        return target.note
    return None


def claim_to_target(
    number: int, runs: list[RunSeed], roles: Roles, target: Target, key: str, what: str
) -> Claim:
    """AdLoCo reaches the target perplexity with less of ``key`` than DiLoCo."""
    statement = f"AdLoCo reaches the target perplexity in {what} than DiLoCo."
    why = _needs(roles, target, diloco=True)
    if why:
        return _not_testable(number, statement, why)
    ad, di = _seeds(runs, roles.adloco), _seeds(runs, roles.diloco)
    ad_values = {s: _to_target(r, target.value, key) for s, r in ad.items()}
    di_values = {s: _to_target(r, target.value, key) for s, r in di.items()}
    ad_mean, di_mean = _mean(list(ad_values.values())), _mean(list(di_values.values()))
    if not any(math.isfinite(v) for v in [*ad_values.values(), *di_values.values()]):
        return _not_testable(
            number, statement, f"neither run reached the target perplexity {fmt(target.value)}"
        )
    common = sorted(set(ad) & set(di))
    agree = sum(ad_values[s] < di_values[s] for s in common)
    unit = "communications" if key == "communications" else "s simulated"
    reached = (
        f"{roles.adloco} reached it in {sum(map(math.isfinite, ad_values.values()))} of "
        f"{len(ad_values)} seeds, {roles.diloco} in "
        f"{sum(map(math.isfinite, di_values.values()))} of {len(di_values)}"
    )
    several = len(ad) > 1 or len(di) > 1

    def amount(value: float) -> str:
        if math.isinf(value):
            return "not reached in every seed" if several else "never reached"
        return f"{fmt(value)} {unit}"

    details = [
        f"Target perplexity {fmt(target.value)} ({target.note}).",
        f"{roles.adloco}: {amount(ad_mean)}; {roles.diloco}: {amount(di_mean)}"
        f"{' (means over seeds)' if several else ''}; {reached}.",
        _agree_text(agree, len(common)).capitalize() + ".",
    ]
    verdict = SUPPORTED if ad_mean < di_mean else NOT_SUPPORTED
    return Claim(number, statement, verdict, details, seeds_agree=agree, seeds=len(common))


def claim_ablations(runs: list[RunSeed], roles: Roles, target: Target) -> Claim:
    """Each ablation ends at a higher perplexity and needs more communications to target."""
    statement = (
        "Each ablation is worse than full AdLoCo: higher final perplexity and more "
        "communications to reach the target."
    )
    why = _needs(roles)
    if why:
        return _not_testable(3, statement, why)
    if not roles.ablations:
        return _not_testable(3, statement, "no ablation runs are configured")
    full = _seeds(runs, roles.adloco)
    full_ppl = {s: finite_or_none(r.summary.get("final_val_perplexity")) for s, r in full.items()}
    if any(v is None for v in full_ppl.values()):
        return _not_testable(3, statement, f"run {roles.adloco} has no final perplexity")
    details = []
    tested, failed = 0, 0
    for name in roles.ablations:
        abl = _seeds(runs, name)
        common = sorted(set(abl) & set(full))
        parts = []
        ppl = {s: finite_or_none(r.summary.get("final_val_perplexity")) for s, r in abl.items()}
        if any(v is None for v in ppl.values()):
            parts.append("final perplexity: not evaluated")
        else:
            worse = fmean(ppl.values()) > fmean(full_ppl.values())
            agree = sum(ppl[s] > full_ppl[s] for s in common)
            tested += 1
            failed += not worse
            parts.append(
                f"final perplexity {fmt(fmean(ppl.values()))} vs {fmt(fmean(full_ppl.values()))} "
                f"({'worse' if worse else 'not worse'}; {_agree_text(agree, len(common))})"
            )
        if target.value is None:
            parts.append("communications to target: no target")
        else:
            a = {s: _to_target(r, target.value, "communications") for s, r in abl.items()}
            f = {s: _to_target(r, target.value, "communications") for s, r in full.items()}
            a_mean, f_mean = _mean(list(a.values())), _mean(list(f.values()))
            if math.isinf(a_mean) and math.isinf(f_mean):
                parts.append("communications to target: not comparable (neither reached it)")
            else:
                worse = a_mean > f_mean
                agree = sum(a[s] > f[s] for s in common)
                tested += 1
                failed += not worse
                parts.append(
                    f"communications to target {fmt(a_mean)} vs {fmt(f_mean)} "
                    f"({'worse' if worse else 'not worse'}; {_agree_text(agree, len(common))})"
                )
        label = roles.ablation_labels.get(name, "")
        details.append(f"{name} ({label}) against {roles.adloco}: " + "; ".join(parts) + ".")
    if tested == 0:
        claim = _not_testable(3, statement, "no comparison could be made (see details)")
        claim.details = details
        return claim
    return Claim(3, statement, NOT_SUPPORTED if failed else SUPPORTED, details)


def _first_last(rows: list[dict], key: str) -> tuple[float, float] | None:
    values = [r for r in rows if isinstance(r.get(key), (int, float))]
    if not values:
        return None
    first, last = min(r["round"] for r in values), max(r["round"] for r in values)
    return (
        max(r[key] for r in values if r["round"] == first),
        max(r[key] for r in values if r["round"] == last),
    )


def claim_batch_growth(runs: list[RunSeed], roles: Roles) -> Claim:
    statement = "Batch sizes grow: the requested batch at the end is larger than at the start."
    why = _needs(roles)
    if why:
        return _not_testable(4, statement, why)
    seeds = _seeds(runs, roles.adloco)
    pairs = {s: _first_last(r.rows, "requested_batch") for s, r in seeds.items()}
    if any(p is None for p in pairs.values()):
        return _not_testable(4, statement, f"run {roles.adloco} logs no requested_batch")
    start = fmean(p[0] for p in pairs.values())
    end = fmean(p[1] for p in pairs.values())
    agree = sum(p[1] > p[0] for p in pairs.values())
    mean_note = " (mean over seeds)" if len(pairs) > 1 else ""
    details = [
        f"{roles.adloco}: largest requested global batch {fmt(start)} in the first round, "
        f"{fmt(end)} in the last{mean_note}; grew in {agree} of {len(pairs)} seeds."
    ]
    verdict = SUPPORTED if end > start else NOT_SUPPORTED
    return Claim(4, statement, verdict, details, seeds_agree=agree, seeds=len(pairs))


def merge_count(rows: list[dict]) -> int:
    """Merge events of a run; an event logged identically on several rows of a round counts once."""
    seen = set()
    for r in rows:
        for event in r.get("events") or []:
            if isinstance(event, dict) and event.get("type") == "merge":
                seen.add((r["round"], repr(sorted(event.items()))))
    return len(seen)


def claim_merges(runs: list[RunSeed], roles: Roles) -> Claim:
    statement = "Trainers merge during training."
    why = _needs(roles)
    if why:
        return _not_testable(5, statement, why)
    seeds = _seeds(runs, roles.adloco)
    settings = next(iter(seeds.values())).settings
    if settings.get("merge", "none") == "none":
        return _not_testable(5, statement, f"merging is off in run {roles.adloco}")
    if settings.get("initial_trainers", 1) < 2:
        return _not_testable(5, statement, f"run {roles.adloco} starts with a single trainer")
    if not any("events" in row for r in seeds.values() for row in r.rows):
        return _not_testable(5, statement, f"run {roles.adloco} logs no events")
    counts = {s: merge_count(r.rows) for s, r in sorted(seeds.items())}
    agree = sum(c > 0 for c in counts.values())
    per_seed = ", ".join(f"seed {s}: {c}" for s, c in counts.items())
    details = [
        f"{roles.adloco}: {_plural(fmean(counts.values()), 'merge event')}"
        f"{' on average' if len(counts) > 1 else ''} ({per_seed}); "
        f"merges in {agree} of {len(counts)} seeds."
    ]
    verdict = SUPPORTED if fmean(counts.values()) > 0 else NOT_SUPPORTED
    return Claim(5, statement, verdict, details, seeds_agree=agree, seeds=len(counts))


def switch_rounds(rows: list[dict]) -> dict[str, int]:
    """Rounds in which some trainer ran in each non-plain switch mode."""
    rounds: dict[str, set[int]] = {"accumulate": set(), "capped": set()}
    for r in rows:
        if r.get("switch_mode") in rounds:
            rounds[r["switch_mode"]].add(r["round"])
    return {mode: len(found) for mode, found in rounds.items()}


def claim_switch(runs: list[RunSeed], roles: Roles) -> Claim:
    statement = "Switch mode engages: some rounds run capped or with gradient accumulation."
    why = _needs(roles)
    if why:
        return _not_testable(6, statement, why)
    seeds = _seeds(runs, roles.adloco)
    settings = next(iter(seeds.values())).settings
    if settings.get("switch", "switch") != "switch":
        return _not_testable(
            6, statement, f"run {roles.adloco} uses the {settings['switch']} policy"
        )
    if not any("switch_mode" in row for r in seeds.values() for row in r.rows):
        return _not_testable(6, statement, f"run {roles.adloco} logs no switch_mode")
    counts = {s: switch_rounds(r.rows) for s, r in sorted(seeds.items())}
    engaged = {s: c["accumulate"] + c["capped"] > 0 for s, c in counts.items()}
    agree = sum(engaged.values())
    per_seed = "; ".join(
        f"seed {s}: {_plural(c['accumulate'], 'round')} with accumulation, "
        f"{_plural(c['capped'], 'round')} capped"
        for s, c in counts.items()
    )
    details = [f"{roles.adloco}: {per_seed}; engaged in {agree} of {len(counts)} seeds."]
    if not agree:
        requested = [
            row["requested_batch"]
            for r in seeds.values()
            for row in r.rows
            if isinstance(row.get("requested_batch"), (int, float))
        ]
        details.append(
            f"The largest requested global batch was {fmt(max(requested, default=None))}; "
            "switch mode engages only when a slot's share of it is above the device's max batch "
            "(calibration table)."
        )
    mean_rounds = fmean(c["accumulate"] + c["capped"] for c in counts.values())
    verdict = SUPPORTED if mean_rounds > 0 else NOT_SUPPORTED
    return Claim(6, statement, verdict, details, seeds_agree=agree, seeds=len(counts))


def evaluate_claims(runs: list[RunSeed], roles: Roles, target: Target) -> list[Claim]:
    return [
        claim_to_target(1, runs, roles, target, "communications", "fewer communications"),
        claim_to_target(2, runs, roles, target, "sim_time_s", "less simulated time"),
        claim_ablations(runs, roles, target),
        claim_batch_growth(runs, roles),
        claim_merges(runs, roles),
        claim_switch(runs, roles),
    ]
