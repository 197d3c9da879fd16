"""The page's parts: what it shows (:class:`Page`) and the HTML pieces every section uses.

Part of ``adloco report``: :func:`adloco.report.build_report` fills a
:class:`Page`; the sections (:mod:`adloco.report.page.render`,
:mod:`adloco.report.page.evidence`) turn it into HTML with these helpers:
numbers in their units, tables whose numeric columns are right-aligned and
unbroken, figures embedded as base64 PNG with a one-line caption, verdicts
coloured, spreads over seeds with censored seeds counted, never averaged.
The page is one column at most :data:`PAGE_WIDTH_PX` wide.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup, escape

from adloco.report.analysis.claims import (
    INCONCLUSIVE,
    NO_DIFFERENCE,
    NOT_SUPPORTED,
    NOT_TESTABLE,
    SUPPORTED,
    fmt,
)
from adloco.report.analysis.findings import Findings
from adloco.report.analysis.scale import ScaleComparison
from adloco.report.analysis.seed_stats import Spread
from adloco.report.inputs import Inputs
from adloco.report.page.template import render, stylesheet
from adloco.report.settings import ReportSettings

PAGE_WIDTH_PX = 1200  # content width; with the margins the page needs 1232 px
BEYOND = Markup("&gt; budget")  # a spread's value where the seed never reached the target

# The page's style sheet, templates/page.css; its text starts on a line of its own.
CSS = "\n" + stylesheet("page", page_width_px=str(PAGE_WIDTH_PX))

VERDICT_CSS = {
    SUPPORTED: "supported",
    NOT_SUPPORTED: "not-supported",
    NO_DIFFERENCE: "no-difference",
    INCONCLUSIVE: "inconclusive",
    NOT_TESTABLE: "not-testable",
}


def between_words(settings: ReportSettings) -> str:
    """How a value to a target is read under ``report.between``, for the page's notes."""
    if settings.section.between == "interpolated":
        return "interpolated in log-perplexity between the evaluations either side of the target"
    return "read at the end of the round that reaches the target"


def esc(value: Any) -> Markup:
    """``value`` as text in HTML: its ``&``, ``<``, ``>`` and quotes escaped (markupsafe)."""
    return escape(str(value))


def human_bytes(value: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(value) >= size:
            return f"{value / size:.3g} {unit}"
    return f"{int(value)} B"


def number(value: Any, quantity: str = "") -> str:
    """A value in the unit of its quantity: bytes in KiB/MiB/GiB, seconds, counts, else 4 digits."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return esc(value)
    if math.isinf(value):
        return "never"
    if "bytes" in quantity:
        return human_bytes(value)
    if quantity.endswith("_s"):
        return f"{value:.3g} s"
    return esc(fmt(float(value)))


def verdict(text: str) -> str:
    return render("verdict", css=VERDICT_CSS.get(text, "not-testable"), text=esc(text))


def table(header: list[str], rows: Iterable[list[str]], numeric: Iterable[int] = ()) -> str:
    """A table; a cell is text (escaped here) or Markup (HTML built from escaped parts).

    Columns in ``numeric`` are right-aligned, unbroken.
    """
    right = set(numeric)

    def attrs(i: int) -> Markup:
        return Markup(" class='n'") if i in right else Markup("")

    head = Markup("").join(
        Markup("<th{}>{}</th>").format(attrs(i), h) for i, h in enumerate(header)
    )
    body = Markup("").join(
        Markup("<tr>{}</tr>").format(
            Markup("").join(Markup("<td{}>{}</td>").format(attrs(i), c) for i, c in enumerate(row))
        )
        for row in rows
    )
    return render("table", head=head, body=body)


def figure(png: bytes | None, name: str, missing: str, **fields: str) -> str:
    """Figure ``name`` embedded: ``templates/figure_<name>.html`` holds its alt text and caption.

    ``missing`` says why a figure that was not drawn is absent; ``fields`` fill
    the caption's own fields.
    """
    if png is None:
        return render("not_drawn", why=esc(missing))
    data = base64.b64encode(png).decode("ascii")
    return render(f"figure_{name}", png=data, **fields)


def spread_cell(s: Spread, quantity: str) -> str:
    """Median over seeds with its range below; censored seeds shown, never averaged."""
    if s.seeds == 0:
        return "–"
    if s.reached == 0:
        return render("spread_none", seeds=str(s.seeds))
    mid = number(s.median, quantity) if math.isfinite(s.median) else BEYOND
    high = number(s.high, quantity) if math.isfinite(s.high) else BEYOND
    if s.seeds == 1:
        return mid
    reached = (
        ""
        if s.reached == s.seeds
        else " " + render("spread_reached", reached=str(s.reached), seeds=str(s.seeds))
    )
    return render("spread", median=mid, low=number(s.low, quantity), high=high, reached=reached)


@dataclass
class Page:
    """What the page is made of: what was read, what was found, and the figures drawn.

    Each section reads its numbers from ``found`` (:func:`adloco.report.compute_findings`),
    and the few things it quotes as read (the configuration's path and settings,
    the variance and calibration results, the references and the base model)
    from ``inputs``.
    """

    inputs: Inputs
    found: Findings
    figures: dict[str, bytes | None]  # name -> PNG (None: not drawn)
    scale: ScaleComparison | None = None  # analysis.scale.compare_scale (--compare-scale)


def levels_of(p: Page) -> dict[str, float]:
    """Reference perplexities and the base model's, highest first."""
    return dict(sorted(p.found.levels.items(), key=lambda kv: -kv[1]))


def curve_text(c) -> str:
    """A step-time curve in words: pass time by micro-batch, update time."""
    pts = ", ".join(f"{b}: {t:.3g} s" for b, t in zip(c.batches, c.fwd_bwd_s, strict=True))
    return f"pass time by micro-batch {pts}; update {c.update_s:.3g} s"


def levels_note(p: Page) -> str:
    """The reference perplexities and the base model's, as a line under a table of perplexities."""
    levels = levels_of(p)
    if not levels:
        return render("levels_none")
    text = ", ".join(f"{name} {fmt(value)}" for name, value in levels.items())
    return render("levels", levels=esc(text))
