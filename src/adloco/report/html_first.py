"""The page's first screen: what was run, the three verdicts in a sentence each, one figure.

:func:`about_block` gives model, data, device and network, seeds and code
(:mod:`adloco.report.about`); :func:`verdict_items` each claim's verdict with
its effect in one sentence (:func:`short_reason`); the headline runs' curves
against simulated time follow (:mod:`adloco.report.figures_headline`). The
long reasons, where AdLoCo is faster and the rules fold under a details
element of the answer section (:func:`adloco.report.html_verdicts.answer_section`).
"""

from __future__ import annotations

import math

from adloco.report.claims import QUANTITY_WORDS, Claim, Comparison, fmt, fmt_p, fmt_ratio
from adloco.report.page import Page, esc, figure, verdict
from adloco.report.template import render


def about_block(p: Page) -> str:
    rows = "".join(render("about_row", key=esc(k), value=esc(v)) for k, v in p.about)
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
    return f"{head} (median over {seeds}; p = {fmt_p(e.test.p_less)})"


def short_reason(claim: Claim) -> str:
    """The claim's verdict in one sentence: each headline comparison's effect and p."""
    heads = claim.headline
    if not heads:
        return claim.reason
    return "; ".join(_effect_words(c) for c in heads) + "."


def verdict_items(p: Page) -> str:
    items = "".join(
        render(
            "verdict_item",
            statement=esc(c.statement),
            verdict=verdict(c.verdict),
            reason=esc(short_reason(c)),
        )
        for c in p.claims
    )
    return render("verdicts", items=items)


def headline_curves(p: Page) -> str:
    anchor = " " + render("headline_anchor", ddp=p.roles.ddp) if p.roles.ddp else ""
    return figure(
        p.figures.get("headline_curves"),
        "headline_curves",
        "No headline run has a perplexity curve.",
        anchor=anchor,
    )
