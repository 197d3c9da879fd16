"""The page's parts: what it shows (:class:`Page`) and the HTML pieces every section uses.

Part of ``adloco report``: :func:`adloco.report.build_report` fills a
:class:`Page`; the sections (:mod:`adloco.report.html`,
:mod:`adloco.report.html_evidence`) turn it into HTML with these helpers:
numbers in their units, tables whose numeric columns are right-aligned and
unbroken, figures embedded as base64 PNG with a one-line caption, verdicts
coloured, spreads over seeds with censored seeds counted, never averaged.
The page is one column at most :data:`PAGE_WIDTH_PX` wide.
"""

from __future__ import annotations

import base64
import html
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from adloco.report.claims import (
    INCONCLUSIVE,
    NOT_SUPPORTED,
    NOT_TESTABLE,
    SUPPORTED,
    Claim,
    fmt,
)
from adloco.report.gain import GainShares
from adloco.report.headline import Headline
from adloco.report.inputs import Calibration, Variance
from adloco.report.mechanisms import Check
from adloco.report.references import Base, References
from adloco.report.regimes import ClockModel, RegimeCell
from adloco.report.replay import Regimes
from adloco.report.settings import ReportSettings, Roles
from adloco.report.stats import Spread
from adloco.report.targets import Ladder
from adloco.report.workers_map import WorkersMap

PAGE_WIDTH_PX = 1200  # content width; with the margins the page needs 1232 px

CSS = f"""
body {{ font-family: system-ui, sans-serif; font-size: 15px; max-width: {PAGE_WIDTH_PX}px;
       margin: 1.5em auto; padding: 0 16px; color: #222; line-height: 1.45; }}
h1 {{ font-size: 1.6em; }} h2 {{ border-bottom: 1px solid #ddd; margin-top: 1.8em; }}
table {{ border-collapse: collapse; margin: 0.6em 0; font-size: 13px; max-width: 100%; }}
th, td {{ border: 1px solid #ccc; padding: 3px 6px; text-align: left; vertical-align: top;
         overflow-wrap: break-word; }}
th {{ background: #f2f2f2; }}
td.n, th.n {{ text-align: right; }} td.n {{ white-space: nowrap; }}
td small, th small {{ display: block; white-space: normal; color: #666; font-size: 11px;
                     font-weight: normal; }}
figure {{ margin: 0.8em 0; }}
img {{ max-width: 100%; height: auto; border: 1px solid #eee; }}
figcaption {{ color: #444; font-size: 13px; }}
.verdict {{ font-weight: bold; padding: 0 4px; border-radius: 3px; white-space: nowrap; }}
.supported, .holds {{ background: #d6f5d6; }} .not-supported, .fails {{ background: #f9d6d6; }}
.inconclusive, .unclear {{ background: #fff3c4; }} .not-testable {{ background: #eee; }}
.own {{ outline: 2px solid #333; outline-offset: -2px; }}
.note {{ color: #555; font-size: 13px; }}
.warning {{ background: #fff3c4; padding: 4px 8px; border-left: 4px solid #c90; }}
details > summary {{ cursor: pointer; color: #235; }}
nav a {{ margin-right: 0.8em; }}
table.about {{ font-size: 13px; }} table.about th {{ white-space: nowrap; width: 9em; }}
ol.verdicts li {{ margin-bottom: 0.3em; }}
"""

VERDICT_CSS = {
    SUPPORTED: "supported",
    NOT_SUPPORTED: "not-supported",
    INCONCLUSIVE: "inconclusive",
    NOT_TESTABLE: "not-testable",
}


def between_words(settings: ReportSettings) -> str:
    """How a value to a target is read under ``report.between``, for the page's notes."""
    if settings.between == "interpolated":
        return "interpolated in log-perplexity between the evaluations either side of the target"
    return "read at the end of the round that reaches the target"


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


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
    return f"<span class='verdict {VERDICT_CSS.get(text, 'not-testable')}'>{esc(text)}</span>"


def table(header: list[str], rows: Iterable[list[str]], numeric: Iterable[int] = ()) -> str:
    """A table; cells are HTML already. Columns in ``numeric`` are right-aligned, unbroken."""
    right = set(numeric)

    def attrs(i: int) -> str:
        return " class='n'" if i in right else ""

    head = "".join(f"<th{attrs(i)}>{h}</th>" for i, h in enumerate(header))
    body = "".join(
        "<tr>" + "".join(f"<td{attrs(i)}>{c}</td>" for i, c in enumerate(row)) + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def figure(png: bytes | None, alt: str, caption: str, missing: str) -> str:
    """An embedded PNG with a one-line caption saying what to look at."""
    if png is None:
        return f"<p class='note'>Not drawn: {esc(missing)}.</p>"
    data = base64.b64encode(png).decode("ascii")
    return (
        f"<figure><img alt='{esc(alt)}' src='data:image/png;base64,{data}'>"
        f"<figcaption>{caption}</figcaption></figure>"
    )


def spread_cell(s: Spread, quantity: str) -> str:
    """Median over seeds with its range below; censored seeds shown, never averaged."""
    if s.seeds == 0:
        return "–"
    if s.reached == 0:
        return f"&gt; budget<small>0/{s.seeds} seeds reached</small>"
    mid = number(s.median, quantity) if math.isfinite(s.median) else "&gt; budget"
    high = number(s.high, quantity) if math.isfinite(s.high) else "&gt; budget"
    if s.seeds == 1:
        return mid
    reached = "" if s.reached == s.seeds else f" · {s.reached}/{s.seeds} reached"
    return f"{mid}<small>{number(s.low, quantity)} – {high}{reached}</small>"


@dataclass
class Page:
    """Everything the page shows, computed by :func:`adloco.report.build_report`."""

    config_path: str
    version: str
    run_names: list[str]
    seeds: dict[str, list[int]]  # run -> its seeds
    roles: Roles
    settings: ReportSettings
    ladder: Ladder
    claims: list[Claim]
    headline: Headline | None
    ladder_table: dict
    regimes: list[RegimeCell]
    regime_sweeps: Regimes | None
    clock_models: list[ClockModel]
    own_clock: dict[str, Any]
    clock_reason: str
    per_run: list[dict[str, Any]]
    merges: list[dict[str, Any]]
    checks: list[Check]
    figures: dict[str, bytes | None]
    variance: Variance
    calibrations: list[Calibration]
    references: References
    base: Base | None
    noise: list[dict[str, Any]]  # adloco.report.noise.noise_summary
    tuning: list[dict[str, Any]] | None  # adloco.report.tuning.tuning_table
    tuning_path: str | None
    tuning_main: dict[str, Any] | None  # the record's suggested main target
    gains: GainShares  # adloco.report.gain.gain_shares
    workers: WorkersMap  # adloco.report.workers_map.workers_map
    about: list[tuple[str, str]] = field(default_factory=list)  # adloco.report.about.about_rows

    def levels(self) -> dict[str, float]:
        """Reference perplexities and the base model's, highest first."""
        out = dict(self.references.levels)
        if self.base is not None:
            out["base model"] = self.base.val_perplexity
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def curve_text(c) -> str:
    """A step-time curve in words: pass time by micro-batch, update time."""
    pts = ", ".join(f"{b}: {t:.3g} s" for b, t in zip(c.batches, c.fwd_bwd_s, strict=True))
    return f"pass time by micro-batch {pts}; update {c.update_s:.3g} s"


def levels_note(p: Page) -> str:
    """The reference perplexities and the base model's, as a line under a table of perplexities."""
    levels = p.levels()
    if not levels:
        return "<p class='note'>No reference perplexities or base model to compare with.</p>"
    text = ", ".join(f"{name} {fmt(value)}" for name, value in levels.items())
    return f"<p class='note'>For comparison — {esc(text)}.</p>"
