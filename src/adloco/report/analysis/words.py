"""The findings in words: plain sentences that claims.json and the page both say.

Claim 1's context (:func:`clock_words`: the device its clock comes from, its
ratio in tokens, which no clock enters, and the knee of the regime map where
its verdict changes), each claim's verdict in one sentence
(:func:`short_reason`) and where the wall-clock claim holds across the
bandwidth sweep (:func:`regime_summary`). Text only: the page escapes it.
"""

from __future__ import annotations

import math

from adloco.report.analysis.claims import (
    NO_DIFFERENCE,
    NOT_SUPPORTED,
    QUANTITY_WORDS,
    SUPPORTED,
    Claim,
    Comparison,
    fmt,
    fmt_p,
    fmt_ratio,
)
from adloco.report.analysis.findings import Findings
from adloco.report.analysis.regime_map import verdict_changes
from adloco.report.analysis.regime_sweep import bandwidth_text
from adloco.report.settings import ReportSettings


def _effect_words(c: Comparison, who: str = "AdLoCo") -> str:
    e = c.effect
    what = c.words or QUANTITY_WORDS[c.quantity]
    if c.target is not None and c.quantity not in ("final_val_perplexity", "perplexity_at_time"):
        what += f" to {fmt(c.target)}"
    if e is None:
        return f"{c.baseline}: no {what} to compare"
    if e.estimate == 0:
        head = f"{c.baseline} never gets there"
    elif math.isinf(e.estimate):
        head = f"{c.subject} never gets there, {c.baseline} does"
    else:
        head = f"{who} needs {fmt_ratio(e.estimate)}× {c.baseline}'s {what}"
    seeds = f"{len(e.seeds)} paired seeds" if e.pairing == "seed" else "unpaired runs"
    eq = e.equivalence if c.verdict == NO_DIFFERENCE else None
    within = f"; within {math.exp(eq.margin):.3g}× either way: p = {fmt_p(eq.p)}" if eq else ""
    return f"{head} (median over {seeds}; p = {fmt_p(e.test.p_less)}{within})"


def short_reason(claim: Claim) -> str:
    """The claim's verdict in one sentence: each headline comparison's effect and p; then what
    is tested beside it (claim 2 in bytes and in the paper's count, claim 1 for the paper's
    configuration) with its verdict, and what decides the verdict (:attr:`Claim.decides`)."""
    heads = claim.headline
    if not heads:
        return claim.reason
    subject = heads[0].subject
    words = ["; ".join(_effect_words(c) for c in heads) + "."]
    beside = [
        f"{_effect_words(c, 'AdLoCo' if c.subject == subject else c.subject)}: {c.verdict}"
        for c in claim.comparisons
        if c.beside
    ]
    if beside:
        words.append(f"Beside it: {'; '.join(beside)}.")
    if claim.decides:
        words.append(claim.decides)
    return " ".join(words)


def knee_words(found: Findings) -> str:
    """At which roofline knee of the regime map claim 1's verdict against DiLoCo changes."""
    sweeps = found.regimes
    if sweeps is None or not sweeps.grid.cells:
        return ""
    bandwidth = float(found.clock["bandwidth_gbit_s"])
    row, changes = verdict_changes(
        sweeps.grid.cells, "diloco", found.clock["slot_sharing"], bandwidth
    )
    if not row:
        return ""
    at = (
        f"On the regime map's rooflines at {bandwidth:g} Gbit/s (knees of {row[0][0]} to "
        f"{row[-1][0]} sequences a pass)"
    )
    if not changes:
        return f"{at}, no knee in the swept range changes the verdict ({row[0][1]} at every one)."
    turns = "; ".join(f"{c.before} at {c.below}, {c.after} at {c.above}" for c in changes)
    return f"{at}, the verdict changes between knees: {turns}."


def clock_words(found: Findings) -> str:
    """Claim 1's context: the device its clock comes from, tokens to target, the knee."""
    sweeps = found.regimes
    if sweeps is None:
        return ""
    words = [f"The clock: {sweeps.clock_source}." if sweeps.clock_source else ""]
    tokens = sweeps.tokens
    if tokens is not None and tokens.effect is not None:
        words.append(
            f"In tokens, which no clock enters: {_effect_words(tokens)}, {tokens.verdict}."
        )
    words.append(knee_words(found))
    return " ".join(w for w in words if w)


def regime_summary(found: Findings, settings: ReportSettings) -> str:
    """One sentence: where, at the main target, the wall-clock claim holds against DiLoCo."""
    cells = [
        c
        for c in found.regimes.cells
        if c.target == found.ladder.main and c.against == "diloco" and not c.network
    ]
    if not cells:
        return "No regime sweep (no AdLoCo and DiLoCo runs, no target or no clock curves)."
    labels = {m.key: m.label for m in found.regimes.models}
    parts = []
    for clock in dict.fromkeys(c.clock for c in cells):
        for sharing in dict.fromkeys(c.sharing for c in cells):
            line = sorted(
                (c for c in cells if c.clock == clock and c.sharing == sharing),
                key=lambda c: c.bandwidth_gbit_s,
            )
            holds = [c.bandwidth_gbit_s for c in line if c.verdict == SUPPORTED]
            fails = [c.bandwidth_gbit_s for c in line if c.verdict == NOT_SUPPORTED]
            where = (
                "at every bandwidth"
                if len(holds) == len(line)
                else "at no bandwidth"
                if not holds
                else f"at {bandwidth_text(min(holds))}"
                if min(holds) == max(holds)
                else f"at {bandwidth_text(min(holds))}–{bandwidth_text(max(holds))}"
            )
            tail = (
                f" (AdLoCo slower by the same test at {len(fails)} of {len(line)} bandwidths)"
                if fails
                else ""
            )
            parts.append(f"{labels[clock]}, {sharing.replace('_', ' ')}: {where}{tail}")
    return (
        f"Where AdLoCo is faster than DiLoCo to perplexity {fmt(found.ladder.main)} by the exact "
        f"paired test at level {settings.section.test_level:g} — " + "; ".join(parts) + "."
    )
