"""The page's first screen: what was run, the three verdicts in a sentence each, one figure.

:func:`about_block` gives model, data, device and network, seeds and code
(:mod:`adloco.report.analysis.about`); :func:`verdict_items` each claim's verdict with
its effect in one sentence (:func:`short_reason`), and for claim 1 the device
its clock comes from, its ratio in tokens (no clock in it) and the knee of the
regime map where its verdict changes (:func:`clock_words`); given another report at another
model size, whether each verdict is the same there (:func:`scale_block`); the headline runs' curves
against simulated time follow (:mod:`adloco.report.figures.headline`). The
long reasons, where AdLoCo is faster and the rules fold under a details
element of the answer section (:func:`adloco.report.page.verdicts.answer_section`).
"""

from __future__ import annotations

import math

from markupsafe import Markup

from adloco.report.analysis.claims import (
    NO_DIFFERENCE,
    QUANTITY_WORDS,
    Claim,
    Comparison,
    fmt,
    fmt_p,
    fmt_ratio,
)
from adloco.report.analysis.regime_map import verdict_changes
from adloco.report.analysis.scale import row_words, summary_words
from adloco.report.page.parts import Page, esc, figure, verdict
from adloco.report.page.template import render


def about_block(p: Page) -> str:
    rows = Markup("").join(render("about_row", key=esc(k), value=esc(v)) for k, v in p.found.about)
    return render("about", rows=rows) if rows else ""


def _effect_words(c: Comparison) -> str:
    e = c.effect
    what = QUANTITY_WORDS[c.quantity]
    if c.target is not None and c.quantity not in ("final_val_perplexity", "perplexity_at_time"):
        what += f" to {fmt(c.target)}"
    if e is None:
        return f"{c.baseline}: no {what} to compare"
    if e.estimate == 0:
        head = f"{c.baseline} never gets there"
    elif math.isinf(e.estimate):
        head = f"{c.subject} never gets there, {c.baseline} does"
    else:
        head = f"AdLoCo needs {fmt_ratio(e.estimate)}× {c.baseline}'s {what}"
    seeds = f"{len(e.seeds)} paired seeds" if e.pairing == "seed" else "unpaired runs"
    eq = e.equivalence if c.verdict == NO_DIFFERENCE else None
    within = f"; within {math.exp(eq.margin):.3g}× either way: p = {fmt_p(eq.p)}" if eq else ""
    return f"{head} (median over {seeds}; p = {fmt_p(e.test.p_less)}{within})"


def short_reason(claim: Claim) -> str:
    """The claim's verdict in one sentence: each headline comparison's effect and p."""
    heads = claim.headline
    if not heads:
        return claim.reason
    return "; ".join(_effect_words(c) for c in heads) + "."


def knee_words(p: Page) -> str:
    """At which roofline knee of the regime map claim 1's verdict against DiLoCo changes."""
    sweeps = p.found.regimes
    if sweeps is None or not sweeps.grid.cells:
        return ""
    bandwidth = float(p.found.clock["bandwidth_gbit_s"])
    row, changes = verdict_changes(
        sweeps.grid.cells, "diloco", p.found.clock["slot_sharing"], bandwidth
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


def clock_words(p: Page) -> str:
    """Claim 1's context: the device its clock comes from, tokens to target, the knee."""
    sweeps = p.found.regimes
    if sweeps is None:
        return ""
    words = [f"The clock: {sweeps.clock_source}." if sweeps.clock_source else ""]
    tokens = sweeps.tokens
    if tokens is not None and tokens.effect is not None:
        words.append(
            f"In tokens, which no clock enters: {_effect_words(tokens)}, {tokens.verdict}."
        )
    words.append(knee_words(p))
    return " ".join(w for w in words if w)


def scale_block(p: Page) -> str:
    """Each claim's verdict here and at the other model size (``--compare-scale``), or ""."""
    s = p.scale
    if s is None:
        return ""
    if s.missing:
        return render("scale_missing", why=esc(s.missing))
    items = Markup("").join(render("scale_item", text=esc(row_words(r, s))) for r in s.rows)
    return render("scale", lead=esc(summary_words(s)), items=items)


def verdict_items(p: Page) -> str:
    items = Markup("").join(
        render(
            "verdict_item",
            statement=esc(c.statement),
            verdict=verdict(c.verdict),
            reason=esc(
                " ".join(w for w in (short_reason(c), clock_words(p) if c.number == 1 else "") if w)
            ),
        )
        for c in p.found.claims
    )
    return render("verdicts", items=items) + scale_block(p)


def headline_curves(p: Page) -> str:
    anchor = " " + render("headline_anchor", ddp=p.found.roles.ddp) if p.found.roles.ddp else ""
    return figure(
        p.figures.get("headline_curves"),
        "headline_curves",
        "No headline run has a perplexity curve.",
        anchor=anchor,
    )
