"""The page's first screen: what was run, the three verdicts in a sentence each, one figure.

:func:`about_block` gives model, data, device and network, seeds and code
(:mod:`adloco.report.analysis.about`); :func:`verdict_items` each claim's verdict with
its effect in one sentence, and for claim 1 the device its clock comes from,
its ratio in tokens (no clock in it) and the knee of the regime map where its
verdict changes (:mod:`adloco.report.analysis.words`); given another report at another
model size, whether each verdict is the same there (:func:`scale_block`); the headline runs' curves
against simulated time follow (:mod:`adloco.report.figures.headline_figure`). The
long reasons, where AdLoCo is faster and the rules fold under a details
element of the answer section (:func:`adloco.report.page.verdicts.answer_section`).
"""

from __future__ import annotations

from markupsafe import Markup

from adloco.report.analysis.scale import row_words, summary_words
from adloco.report.analysis.words import clock_words, short_reason
from adloco.report.page.parts import Page, esc, figure, verdict
from adloco.report.page.template import render


def about_block(p: Page) -> str:
    rows = Markup("").join(render("about_row", key=esc(k), value=esc(v)) for k, v in p.found.about)
    return render("about", rows=rows) if rows else ""


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
                " ".join(
                    w for w in (short_reason(c), clock_words(p.found) if c.number == 1 else "") if w
                )
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
