"""The report page: one self-contained HTML file that fits a 1280-px browser.

Last step of ``adloco report``: renders ``index.html`` from what the other
modules computed (verdicts, ladder, regimes, per-run numbers, mechanism
checks, figures as PNG bytes, variance and calibration). The page's structure
is ``templates/page.html`` (:mod:`adloco.report.page.template`); figures are embedded
as base64 PNG, so the page references no other file. The layout is a single
column at most :data:`PAGE_WIDTH_PX` wide; tables are built to wrap within
it (``tests/report/page/test_render.py`` checks their widths without a browser, and
``scripts/render-report.py`` renders the page in headless Chromium). Nothing
time-dependent is written, so the same results give the same page.
"""

from __future__ import annotations

from adloco import __version__
from adloco.report.page.evidence import (
    headline_section,
    noise_section,
    rules_section,
    targets_section,
    tuning_section,
)
from adloco.report.page.first import about_block
from adloco.report.page.inputs import calibration_section, variance_section
from adloco.report.page.parts import CSS, PAGE_WIDTH_PX, Page, esc
from adloco.report.page.regime_section import regimes_section
from adloco.report.page.run_sections import (
    ladder_section,
    mechanisms_section,
    per_run_section,
)
from adloco.report.page.template import render
from adloco.report.page.verdicts import answer_section, claims_section
from adloco.report.page.workers import workers_section

__all__ = ["PAGE_WIDTH_PX", "Page", "render_page"]


def _roles(p: Page) -> str:
    """Each role's runs, with where a role was read from when it was not configured."""
    return "; ".join(
        f"{label} {', '.join(v) if isinstance(v, list) else v}"
        + (f" ({p.found.roles.sources[key]})" if key in p.found.roles.sources else "")
        for label, key, v in (
            ("AdLoCo", "adloco", p.found.roles.adloco),
            ("DiLoCo", "diloco", p.found.roles.diloco),
            ("ddp anchor", "ddp", p.found.roles.ddp),
            ("baselines", "baselines", p.found.roles.baselines),
            ("ablations", "ablations", p.found.roles.ablations),
            ("variants", "variants", p.found.roles.variants),
        )
        if v
    )


def method_section(p: Page) -> str:
    return render(
        "method",
        version=esc(__version__),
        config_path=esc(p.inputs.config_path),
        roles=esc(_roles(p)),
    )


def render_page(p: Page) -> str:
    """The page: ``templates/page.html`` with every section filled, and a final line break."""
    variance = variance_section(
        p.inputs.variance, p.figures.get("deviations"), p.figures.get("variance")
    )
    sections = {
        "answer": answer_section(p),
        "claims": claims_section(p),
        "workers": workers_section(p),
        "seeds": headline_section(p),
        "rules": rules_section(p),
        "targets": targets_section(p),
        "ladder": ladder_section(p),
        "regimes": regimes_section(p),
        "runs_section": per_run_section(p),
        "noise": noise_section(p),
        "tuning": tuning_section(p),
        "mechanisms": mechanisms_section(p),
        "variance": variance,
        "calibration": calibration_section(p.inputs.calibrations, p.found.regimes.models),
        "method": method_section(p),
    }
    page = render(
        "page", css=CSS, about=about_block(p), runs=esc(", ".join(p.found.names)), **sections
    )
    return page + "\n"
