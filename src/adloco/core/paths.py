"""Where each stage reads and writes, in one place.

Data are shared by every configuration that tokenizes the same data set
(``data/tokenized/<dataset>/``); everything an experiment computes lives under
``results/<experiment>/`` (``experiment`` is a configuration field), so the
default, the paper preset and a user's variant never overwrite each other's
calibration, variance, runs or report. The Snakemake rules and the DVC
agreement test build their paths here; dvc.yaml spells the same layout.
Paths are relative to the working directory (the repository root when run
through Snakemake or DVC). This module imports nothing beyond the standard
library, so the workflow can read it with Snakemake's dependencies alone.
"""

from __future__ import annotations

from pathlib import Path

RAW = Path("data/raw")
TOKENIZED = Path("data/tokenized")
RESULTS = Path("results")
LOGS = Path("logs")


def tokenized_dir(dataset: str) -> Path:
    return TOKENIZED / dataset


def experiment_dir(experiment: str) -> Path:
    return RESULTS / experiment


def calibration_dir(experiment: str) -> Path:
    return experiment_dir(experiment) / "calibration"


def calibration_file(experiment: str, device: str) -> Path:
    return device_calibration_file(calibration_dir(experiment), device)


def device_calibration_file(calibration_dir: str | Path, device: str) -> Path:
    """A device's file in a calibration folder (``--calibration``)."""
    return Path(calibration_dir) / f"{device}.json"


def variance_dir(experiment: str) -> Path:
    return experiment_dir(experiment) / "variance"


def runs_dir(experiment: str) -> Path:
    return experiment_dir(experiment) / "runs"


def seed_dir_name(seed: int | str) -> str:
    return f"seed{seed}"


def run_seeds_dir(experiment: str, run: str) -> Path:
    """The folder of a run's seed folders (``--out`` of ``adloco train --seed all``)."""
    return runs_dir(experiment) / run


def run_dir(experiment: str, run: str, seed: int | str) -> Path:
    return run_seeds_dir(experiment, run) / seed_dir_name(seed)


def run_checkpoints_dir(experiment: str, run: str) -> Path:
    """The folder of a run's seeds' checkpoint folders (``--checkpoints`` of ``--seed all``)."""
    # Outside the run folder: Snakemake removes a failed job's declared outputs,
    # and the checkpoints must survive that so a re-run resumes.
    return experiment_dir(experiment) / "checkpoints" / run


def checkpoint_dir(experiment: str, run: str, seed: int | str) -> Path:
    return run_checkpoints_dir(experiment, run) / seed_dir_name(seed)


def base_dir(experiment: str) -> Path:
    """The experiment's base model (``adloco pretrain``): model/, base.json, metrics.jsonl."""
    return experiment_dir(experiment) / "base"


# The base's checkpoints sit beside the runs' (checkpoints/<run>/): no run may take its name.
BASE_CHECKPOINTS = "base"
RESERVED_RUN_NAMES = (BASE_CHECKPOINTS,)


def base_checkpoint_dir(experiment: str) -> Path:
    return experiment_dir(experiment) / "checkpoints" / BASE_CHECKPOINTS


def run_live_dir(experiment: str, run: str) -> Path:
    """A run's live curves (``--live``): under logs/, a view of the run, not a result.

    Outside the run folder, which is written aside and swapped in only at the
    end, and outside everything DVC hashes.
    """
    return logs_dir(experiment) / "live" / run


def live_dir(experiment: str, run: str, seed: int | str) -> Path:
    """A run's seed's live curves: ``seed<seed>/`` of :func:`run_live_dir`."""
    return run_live_dir(experiment, run) / seed_dir_name(seed)


def base_live_dir(experiment: str) -> Path:
    """The base model's live curves, beside the runs' (``base`` is no run's name)."""
    return logs_dir(experiment) / "live" / BASE_CHECKPOINTS


def report_dir(experiment: str) -> Path:
    return experiment_dir(experiment) / "report"


def logs_dir(experiment: str) -> Path:
    return LOGS / experiment


def data_logs_dir(dataset: str) -> Path:
    # The data stages belong to the data set, shared by experiments.
    return LOGS / "data" / dataset


# Files inside result folders, by the folder they are in (the folder given on
# a command line, ``--runs``, ``--variance``, ``--data``, ``--base``).


def seed_dir(runs_folder: str | Path, run: str, seed: int | str) -> Path:
    """One run's seed in a runs folder (``--runs``): ``<runs>/<run>/seed<seed>``."""
    return Path(runs_folder) / run / seed_dir_name(seed)


def metrics_file(folder: str | Path) -> Path:
    """The metrics rows of a run's seed folder or of the base model's folder."""
    return Path(folder) / "metrics.jsonl"


def run_summary_file(folder: str | Path) -> Path:
    """A run's summary in its seed folder."""
    return Path(folder) / "summary.json"


def final_model_dir(folder: str | Path) -> Path:
    """A run's exported model and tokenizer in its seed folder."""
    return Path(folder) / "final"


def report_figures_dir(experiment: str) -> Path:
    return report_dir(experiment) / "figures"


# The report's figures, each written as <name>.png in its figures/ folder (one
# not drawn for lack of data says so): dvc.yaml names each file as an output,
# not the folder, which DVC would empty of a user's files before the stage runs.
REPORT_FIGURE_NAMES = (
    "headline_curves",
    "curves",
    "noise_scale",
    "ladder",
    "regimes",
    "regime_map",
    "merges",
    "batch",
    "trainers",
    "ablations",
    "variance",
    "workers_map",
)

# The report's files that git keeps (.gitignore lets them through): a clone holds
# them before the report's manifest exists (adloco.core.io.check_replaceable's in_git).
REPORT_FILES_IN_GIT = ("metrics.json", "median_curves.csv")


def variance_summary_file(folder: str | Path) -> Path:
    """The variance stage's results in its folder (``--variance``)."""
    return Path(folder) / "variance.json"


def variance_per_batch_file(folder: str | Path) -> Path:
    """The variance stage's table of its batches' deviations."""
    return Path(folder) / "per_batch.csv"


def variance_draws_file(folder: str | Path) -> Path:
    """The variance stage's table of the scalar-vs-pooled comparison's draws."""
    return Path(folder) / "draws.csv"


def variance_deviations_file(folder: str | Path) -> Path:
    """The variance stage's histogram of the deviations."""
    return Path(folder) / "deviations.png"


def base_summary_file(folder: str | Path) -> Path:
    """The base model's summary in its folder (``--base``)."""
    return Path(folder) / "base.json"


def manifest_file(folder: str | Path) -> Path:
    """The manifest of a tokenized data folder (``--data``)."""
    return Path(folder) / "manifest.json"
