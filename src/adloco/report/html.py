"""The report page: one self-contained HTML file that fits a 1280-px browser.

Last step of ``adloco report``: renders ``index.html`` from what the other
modules computed (verdicts, ladder, regimes, per-run numbers, mechanism
checks, figures as PNG bytes, variance and calibration). Figures are embedded
as base64 PNG, so the page references no other file. The layout is a single
column at most :data:`PAGE_WIDTH_PX` wide; tables are built to wrap within
it (``tests/report/test_html.py`` checks their widths without a browser, and
``scripts/render-report.py`` renders the page in headless Chromium). Nothing
time-dependent is written, so the same results give the same page.
"""

from __future__ import annotations

from adloco.report.html_evidence import (
    headline_section,
    noise_section,
    rules_section,
    targets_section,
    tuning_section,
)
from adloco.report.html_first import about_block
from adloco.report.html_inputs import calibration_section, variance_section
from adloco.report.html_regimes import regime_summary, regimes_section
from adloco.report.html_runs import (
    PER_RUN,
    ladder_section,
    mechanisms_section,
    per_run_section,
)
from adloco.report.html_verdicts import answer_section, claims_section
from adloco.report.html_workers import workers_section
from adloco.report.page import CSS, PAGE_WIDTH_PX, Page, esc

__all__ = ["PAGE_WIDTH_PX", "PER_RUN", "Page", "regime_summary", "render_page"]


def method_section(p: Page) -> str:
    return (
        "<h2 id='method'>How this page is made</h2>"
        f"<p class='note'>adloco {esc(p.version)}, configuration {esc(p.config_path)}. Roles: "
        + esc(
            "; ".join(
                f"{label} {', '.join(v) if isinstance(v, list) else v}"
                + (f" ({p.roles.sources[key]})" if key in p.roles.sources else "")
                for label, key, v in (
                    ("AdLoCo", "adloco", p.roles.adloco),
                    ("DiLoCo", "diloco", p.roles.diloco),
                    ("ddp anchor", "ddp", p.roles.ddp),
                    ("baselines", "baselines", p.roles.baselines),
                    ("ablations", "ablations", p.roles.ablations),
                    ("variants", "variants", p.roles.variants),
                )
                if v
            )
        )
        + ". docs/report.md states how every table and figure is computed; "
        "<code>adloco report</code> rebuilds this page from the results, "
        "<code>scripts/render-report.py</code> renders it to PNG.</p>"
    )


def render_page(p: Page) -> str:
    nav = " ".join(
        f"<a href='#{k}'>{v}</a>"
        for k, v in (
            ("answer", "Answer"),
            ("claims", "Verdicts"),
            ("workers", "Workers"),
            ("seeds", "Seeds"),
            ("rules", "Rules"),
            ("targets", "Targets"),
            ("ladder", "Target ladder"),
            ("regimes", "Regimes"),
            ("runs", "Per run"),
            ("noise", "Noise scale"),
            ("tuning", "Tuning"),
            ("mechanisms", "Mechanisms"),
            ("variance", "Variance"),
            ("calibration", "Calibration"),
            ("method", "Method"),
        )
    )
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>AdLoCo report</title><style>{CSS}</style></head><body>"
        "<h1>AdLoCo against DiLoCo: report</h1>"
        + about_block(p)
        + f"<p class='note'>Runs: {esc(', '.join(p.run_names))}.</p>"
        f"<nav>{nav}</nav>"
        + answer_section(p)
        + claims_section(p)
        + workers_section(p)
        + headline_section(p)
        + rules_section(p)
        + targets_section(p)
        + ladder_section(p)
        + regimes_section(p)
        + per_run_section(p)
        + noise_section(p)
        + tuning_section(p)
        + mechanisms_section(p)
        + variance_section(p.variance, p.figures.get("deviations"), p.figures.get("variance"))
        + calibration_section(p.calibrations, p.clock_models)
        + method_section(p)
        + "</body></html>\n"
    )
