"""``adloco report``: the last stage, turning results into a page a researcher can read.

Reads every configured run for each of its seeds (``results/<experiment>/runs``),
the calibration of every configured device (``results/<experiment>/calibration``),
the variance stage's folder (``results/<experiment>/variance``) and, when
given, the tokenized data folder (its reference perplexities) and the base
model's folder, and writes into ``--out`` (``results/<experiment>/report``;
:mod:`adloco.core.paths`):

- ``index.html``: a self-contained page (figures embedded) fitting a 1280-px browser;
- ``claims.json``: roles, targets, the stated rules, the headline table, each
  claim's verdict with every comparison's per-seed values, effect, interval
  and exact test (and the verdict under each alternative rule), the
  mechanism checks;
- ``summary.csv`` (one row per run and seed), ``curves.csv`` (perplexity per
  evaluated round), ``ladder.csv`` (each quantity to each target, over seeds),
  ``regimes.csv`` (time-to-target ratios across clocks and bandwidths),
  ``noise_scale.csv`` (B_simple along the AdLoCo runs), ``tuning.json`` (a
  tuning experiment only);
- ``metrics.json`` and ``median_curves.csv``: the numbers and curves DVC's
  commands show (:mod:`adloco.report.tables.dvc_files`);
- ``figures/*.png``.

The layers, in the order they run: ``settings`` (roles, the ``report``
section and what the report derives from it), ``inputs/`` (reading the runs,
calibration, variance, references, base and brought devices), ``analysis/``
(every computation, gathered by :func:`compute_findings` into
:class:`Findings`), ``tables/`` (the CSV and JSON files), ``figures/``
(matplotlib) and ``page/`` (the HTML, from Jinja2 templates). This module is
the flow: read, find, draw, write. docs/report.md says how each number is
computed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from adloco.config import load_config
from adloco.core import paths
from adloco.core.io import atomic_dir, check_replaceable, write_json_atomic, write_text_atomic
from adloco.report.analysis.findings import Findings, compute_findings
from adloco.report.analysis.scale import compare_scale as scale_comparison
from adloco.report.figures.drawing import not_drawn_png, write_figures
from adloco.report.figures.headline_figure import headline_figure
from adloco.report.figures.noise_figures import noise_figure, variance_figure
from adloco.report.figures.regime_figures import draw_regimes
from adloco.report.figures.run_figures import (
    ablations_figure,
    batch_figure,
    curves_figure,
    ladder_figure,
    merges_figure,
    trainers_figure,
)
from adloco.report.figures.workers_map_figure import workers_map_figure
from adloco.report.inputs import Inputs
from adloco.report.inputs.references import load_base, load_references
from adloco.report.inputs.results import load_calibration, load_runs, load_variance
from adloco.report.inputs.tuning_record import load_tuning
from adloco.report.page.render import Page, render_page
from adloco.report.regime_report import ReplayRequest
from adloco.report.settings import ReportSettings
from adloco.report.tables.claims_json import claims_document
from adloco.report.tables.dvc_files import write_dvc_files
from adloco.report.tables.write import write_tables

__all__ = [
    "FIGURE_NAMES", "TABLES", "WRITER", "Findings", "Inputs", "ReportRequest", "build_report",
    "claims_document", "compute_findings", "draw_figures", "make_page", "read_inputs",
    "write_tables",
]  # fmt: skip

log = logging.getLogger(__name__)

# In the order they are drawn (dvc.yaml names each file: adloco.core.paths).
FIGURE_NAMES = paths.REPORT_FIGURE_NAMES

# The writer named in the report folder's manifest: a report folder holding
# anything the report (or `adloco regimes` after it) did not write is refused
# before any work, never replaced (adloco.core.io.check_replaceable).
WRITER = "adloco report"
TABLES = ("summary.csv", "curves.csv", "ladder.csv", "regimes.csv", "noise_scale.csv")


@dataclass(frozen=True, kw_only=True)
class ReportRequest(ReplayRequest):
    """What ``adloco report`` is asked (:mod:`adloco.stages.report`): the regime replay's
    request (the configuration, runs, calibration, data, base, brought devices and
    networks, the folder written) and the report's own two.

    ``data`` and ``base`` are optional: without them the page says what it
    could not show or check. One field per argument of the stage, with its
    default (:func:`adloco.stages.declaration.request_problems` checks).
    """

    variance: str | Path  # the variance stage's folder
    # Another report's claims.json (or its folder) at another model size
    # (adloco.report.analysis.scale).
    compare_scale: str | Path | None = None


def read_inputs(request: ReportRequest) -> Inputs:
    """The configuration and every results folder; a missing required file raises."""
    config = load_config(request.config)
    settings = ReportSettings.from_section(config.report)
    data = Path(request.data) if request.data is not None else None
    return Inputs(
        config_path=str(request.config),
        config=config,
        settings=settings,
        calibration_dir=Path(request.calibration),
        runs=load_runs(Path(request.runs), config),
        calibrations=load_calibration(Path(request.calibration), config.cluster),
        variance=load_variance(Path(request.variance)),
        references=load_references(data),
        base=load_base(Path(request.base) if request.base is not None else None, data),
        tuning=load_tuning(settings.section.tuning),
    )


LADDER_QUANTITY_LABELS = {
    "sim_time_s": "simulated time to target (s)",
    "communications": "communications to target",
}


def draw_figures(inputs: Inputs, found: Findings) -> dict[str, bytes | None]:
    """Every figure as PNG bytes (None: no data for it), in the order they are drawn."""
    runs, roles, main = inputs.runs, found.roles, found.ladder.main
    headline = found.headline.runs if found.headline else [*roles.compared()[:2], roles.ddp]
    return {
        "headline_curves": headline_figure(
            runs, [n for n in headline if n], roles.ddp, main, found.levels
        ),
        "curves": curves_figure(runs, main, found.levels),
        "noise_scale": noise_figure(found.noise, roles.adloco),
        "ladder": ladder_figure(
            runs,
            found.ladder_table,
            found.ladder.targets,
            LADDER_QUANTITY_LABELS,
            inputs.references.levels,
        ),
        **draw_regimes(found.regimes, main),
        "merges": merges_figure(runs, roles.adloco, found.levels),
        "batch": batch_figure(runs, found.adloco_runs),
        "trainers": trainers_figure(runs, found.names),
        "ablations": ablations_figure(runs, roles, main, inputs.settings.reach_rule),
        "variance": variance_figure(inputs.variance),
        "workers_map": workers_map_figure(found.workers),
    }


def make_page(inputs: Inputs, found: Findings, drawn: dict[str, bytes | None]) -> Page:
    """Everything index.html shows: the inputs, the findings, the figures (the variance
    stage's deviations histogram among them, as it drew it)."""
    deviations = inputs.variance.deviations_png
    figures = {**drawn, "deviations": deviations.read_bytes() if deviations else None}
    return Page(inputs, found, figures)


def build_report(request: ReportRequest) -> dict:
    """Read all inputs, write every output; return the document written to claims.json.

    The brought devices, rooflines and networks go into the regime section
    (:mod:`adloco.report.inputs.devices`).
    """
    out_dir = request.out
    check_replaceable(out_dir, WRITER, "--out", paths.REPORT_FILES_IN_GIT)  # before any work
    inputs = read_inputs(request)
    found = compute_findings(inputs, request.devices, request.rooflines, request.networks)
    drawn = draw_figures(inputs, found)
    page = make_page(inputs, found, drawn)
    doc = claims_document(inputs, found)
    if request.compare_scale is not None:
        page.scale = scale_comparison(doc, request.compare_scale)
        doc["scale"] = page.scale.as_dict()
    # All or nothing: the folder is written beside the old one and swapped in at
    # the end, so a failure (a full disk) leaves the previous report whole.
    with atomic_dir(out_dir, WRITER, "--out", paths.REPORT_FILES_IN_GIT) as out:
        curves = write_tables(out, inputs, found)
        write_json_atomic(out / "claims.json", doc)
        write_dvc_files(out, found.summary, found.claims, found.ladder.main, curves)
        write_figures(
            out / "figures", {name: drawn[name] or not_drawn_png(name) for name in FIGURE_NAMES}
        )
        write_text_atomic(out / "index.html", render_page(page))
    for c in found.claims:
        log.info("claim %d: %s — %s", c.number, c.verdict, c.reason)
    return doc
