"""``adloco regimes``: the regime table and figures alone.

The sweeps are :mod:`adloco.report.analysis.regime_replay`'s, which ``adloco report``
calls for its regime section too. The lighter ``adloco regimes`` command:
it reads the configuration, the runs and the calibration (no variance, no
data needed), takes devices and networks brought from elsewhere
(:mod:`adloco.report.inputs.devices`), and writes the folder ``--out``:
``regimes.csv``, ``regimes.json`` (the map's crossing lines, the brought
devices and networks, what each sweep varies and what it cannot) and the
figures ``figures/regimes.png`` and ``figures/regime_map.png``. Nothing is retrained: a
GPU owner replays the default runs on a curve measured on their machine
(docs/calibration.md, "Replaying the runs on your device").

``--out`` is a folder of its own, written beside and swapped in whole
(:func:`adloco.core.io.atomic_dir`): a failure or a kill part-way leaves the
previous files together, never some of a new replay beside some of an old
one. A folder another stage wrote is refused before any work, and so is one
that is, or is inside, a report folder (:func:`check_not_in_report`): the
report's ``regimes.csv`` would disagree with its page.

Every sweep replays the passes the runs logged and their trajectory; what
that cannot change is stated per sweep (:data:`adloco.report.analysis.regime_replay.SWEEPS`).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

from adloco.config import load_config
from adloco.core.io import OWNED_LIST, atomic_dir, check_replaceable, write_json_atomic
from adloco.core.paths import base_summary_file
from adloco.report.analysis.regime_replay import bring, compute_regimes, regime_rows, verdict_lines
from adloco.report.analysis.regime_sweep import REGIME_COLUMNS
from adloco.report.analysis.targets import build_ladder
from adloco.report.figures.drawing import write_figures
from adloco.report.figures.regime_figures import draw_regimes
from adloco.report.inputs.references import load_base, load_references
from adloco.report.inputs.results import load_runs
from adloco.report.settings import ReportSettings, assign_roles
from adloco.report.tables.csv import write_csv

log = logging.getLogger(__name__)

# The writer named in --out's manifest (adloco.core.io.check_replaceable).
WRITER = "adloco regimes"
# What adloco report writes into its folder, and the writer its manifest names.
REPORT_SIGNS = ("index.html", "claims.json")
REPORT_WRITER = "adloco report"


@dataclass(frozen=True, kw_only=True)
class ReplayRequest:
    """What ``adloco regimes`` is asked (:mod:`adloco.stages.regimes`), and ``adloco report``
    too (:class:`adloco.report.ReportRequest` adds its own): the runs and what they are
    replayed on.

    One field per argument of the stage, with its default
    (:func:`adloco.stages.declaration.request_problems` checks).
    """

    config: str | Path  # the configuration YAML
    runs: str | Path  # the folder of runs, results/<experiment>/runs
    calibration: str | Path  # the folder of the runs' calibration records
    out: str | Path  # the folder written
    data: str | Path | None = None  # the tokenized data folder (its reference perplexities)
    base: str | Path | None = None  # the base model's folder
    # Brought from elsewhere (adloco.report.inputs.devices): calibration records
    # of other machines, rooflines and networks, as the command line gives them.
    devices: list[str] | None = None
    rooflines: list[str] | None = None
    networks: list[str] | None = None


def base_folder(
    base_dir: str | Path | None, runs_dir: str | Path, settings: ReportSettings
) -> Path | None:
    """``--base``; else, for targets relative to the base model, the base beside ``--runs``.

    An experiment's folders sit side by side (``paths.runs_dir`` and
    ``paths.base_dir``: ``results/<experiment>/runs`` and ``.../base``), which
    is where Snakemake finds the base for ``adloco report``.
    """
    if base_dir:
        return Path(base_dir)
    if settings.section.targets.relative_to != "base":
        return None
    folder = Path(runs_dir).parent / "base"
    if not base_summary_file(folder).is_file():
        raise ValueError(
            "report.targets.relative_to: base needs the base model's perplexity, and "
            f"{base_summary_file(folder)} (beside --runs) is not there; pass --base the base "
            "model's folder (results/<experiment>/base), or run `adloco pretrain` first"
        )
    log.info("base model: %s (beside --runs)", folder)
    return folder


def _written_by(folder: Path) -> str | None:
    """The writer ``folder``'s manifest names, if it reads as one."""
    try:
        manifest = json.loads((folder / OWNED_LIST).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return manifest.get("written_by") if isinstance(manifest, dict) else None


def report_folder_of(out: Path) -> Path | None:
    """The report folder that ``out`` is or is inside, if any.

    A report folder holds the page and its claims (:data:`REPORT_SIGNS`), or
    a manifest naming ``adloco report`` as its writer.
    """
    for folder in (out, *out.parents):
        signs = all((folder / name).is_file() for name in REPORT_SIGNS)
        if signs or _written_by(folder) == REPORT_WRITER:
            return folder
    return None


def check_not_in_report(out: Path) -> None:
    """Refuse an ``--out`` that is, or is inside, a folder ``adloco report`` wrote.

    The report's ``regimes.csv`` and ``regimes.json`` are those of its page;
    a replay written over them would make the table disagree with the page
    that quotes it, and a folder added inside would be a file the report did
    not write. The brought devices go onto the page by ``adloco report``'s
    own ``--device``, ``--roofline`` and ``--network``.
    """
    folder = report_folder_of(out.resolve())
    if folder is None:
        return
    where = "is" if folder == out.resolve() else f"is inside {folder},"
    raise ValueError(
        f"--out {out}: {where} a report folder adloco report wrote (index.html, "
        "claims.json), whose regimes.csv must stay the one its page shows; write the replay "
        "to a folder of its own (results/<experiment>/replay/<name>), or run adloco report "
        "with the same --device, --roofline and --network to put them on the page"
    )


def replay(request: ReplayRequest) -> list[str]:
    """``adloco regimes``: the regime table and figures of the request's runs, in its ``out``.

    Returns claim 1 at the main target on each brought device and network, in
    the report's words (:func:`verdict_lines`).
    """
    out = Path(request.out)
    check_not_in_report(out)  # before any work
    check_replaceable(out, WRITER, "--out")
    config = load_config(request.config)
    settings = ReportSettings.from_section(config.report)
    runs = load_runs(Path(request.runs), config)
    cal_dir = Path(request.calibration)
    roles = assign_roles(config.report, {r.run: r.settings for r in runs})
    data = Path(request.data) if request.data else None
    references = load_references(data)
    base = load_base(base_folder(request.base, request.runs, settings), data)
    ladder = build_ladder(runs, roles, settings, base, references)
    brought, nets = bring(
        config.cluster, cal_dir, request.devices, request.rooflines, request.networks
    )
    regimes = compute_regimes(runs, roles, ladder, config, cal_dir, settings, brought, nets)
    drawn = draw_regimes(regimes, ladder.main)
    # All or nothing: a new folder written beside --out and swapped in whole.
    with atomic_dir(out, WRITER, "--out") as tmp:
        write_csv(tmp / "regimes.csv", REGIME_COLUMNS, regime_rows(regimes))
        write_json_atomic(tmp / "regimes.json", regimes.as_dict())
        write_figures(tmp / "figures", drawn)
    log.info("wrote %s", out / "regimes.csv")
    return verdict_lines(regimes, ladder, config.cluster)
