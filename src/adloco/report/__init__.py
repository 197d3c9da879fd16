"""``adloco report``: the last stage, turning results into a page and a table.

Reads every configured run and seed (``results/runs``), the calibration of every
configured device (``results/calibration``) and the variance stage's folder
(``results/variance``), and writes into ``--out`` (``results/report``):
``summary.csv`` (one row per run and seed, with time to the target perplexity),
``claims.json`` (the paper's claims with verdicts computed from the data),
``figures/*.png`` and ``index.html``, a self-contained page that embeds the
figures. Submodules: ``inputs`` (reading), ``summary`` (per-run numbers, target),
``claims`` (verdicts), ``figures`` (seaborn), ``html`` (the page). docs/report.md
describes the page.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

log = logging.getLogger(__name__)

FIGURE_NAMES = ("perplexity", "batch", "trainers", "ablations", "variance")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="configuration YAML")
    parser.add_argument("--runs", required=True, help="folder of runs, results/runs")
    parser.add_argument("--calibration", required=True, help="folder of calibration JSON files")
    parser.add_argument("--variance", required=True, help="folder of the variance stage")
    parser.add_argument("--out", required=True, help="output folder, results/report")


def build_report(
    config_path: str | Path,
    runs_dir: str | Path,
    calibration_dir: str | Path,
    variance_dir: str | Path,
    out_dir: str | Path,
) -> dict:
    """Read all inputs, write every output; return the claims as written to claims.json."""
    from adloco import __version__
    from adloco.config import load_config
    from adloco.io import atomic_path, write_json_atomic, write_text_atomic
    from adloco.report import figures
    from adloco.report.claims import evaluate_claims
    from adloco.report.html import render_page
    from adloco.report.inputs import load_calibration, load_runs, load_variance
    from adloco.report.summary import (
        CURVE_COLUMNS,
        assign_roles,
        curve_rows,
        resolve_target,
        summary_rows,
        write_csv,
        write_summary_csv,
    )

    config = load_config(config_path)
    runs = load_runs(Path(runs_dir), config)
    calibrations = load_calibration(Path(calibration_dir), config)
    variance = load_variance(Path(variance_dir))

    roles = assign_roles(config, runs)
    target = resolve_target(config, runs, roles)
    if target.value is None:
        log.warning("%s", target.note)
    summary = summary_rows(runs, target)
    claims = evaluate_claims(runs, roles, target)

    drawn = {
        "perplexity": figures.perplexity_figure(runs, target),
        "batch": figures.batch_figure(runs),
        "trainers": figures.active_trainers_figure(runs),
        "ablations": figures.ablation_figure(runs, roles, target),
        "variance": figures.variance_figure(variance),
    }

    out = Path(out_dir)
    write_summary_csv(out / "summary.csv", summary)
    write_csv(out / "curves.csv", CURVE_COLUMNS, curve_rows(runs))
    claims_doc = {
        "target_perplexity": target.value,
        "target_source": target.source,
        "target_note": target.note,
        "roles": {"diloco": roles.diloco, "adloco": roles.adloco, "ablations": roles.ablations},
        "claims": [c.to_dict() for c in claims],
    }
    write_json_atomic(out / "claims.json", claims_doc)
    # The folder exists even when no figure could be drawn: the workflow declares it.
    (out / "figures").mkdir(parents=True, exist_ok=True)
    for name in FIGURE_NAMES:
        path = out / "figures" / f"{name}.png"
        if drawn[name] is None:
            # A figure from an earlier report would no longer match the data.
            path.unlink(missing_ok=True)
            continue
        with atomic_path(path) as tmp:
            tmp.write_bytes(drawn[name])

    deviations = variance.deviations_png.read_bytes() if variance.deviations_png else None
    page = render_page(
        config_path=str(config_path),
        version=__version__,
        claims=claims,
        summary=summary,
        roles=roles,
        target=target,
        figures={**drawn, "deviations": deviations},
        variance=variance,
        calibrations=calibrations,
    )
    # Last, so an index.html on disk means the files beside it are complete.
    write_text_atomic(out / "index.html", page)
    for c in claims:
        log.info("claim %d: %s", c.number, c.verdict_text)
    return claims_doc


def run(args: argparse.Namespace) -> int:
    build_report(args.config, args.runs, args.calibration, args.variance, args.out)
    log.info("wrote %s", Path(args.out) / "index.html")
    return 0
