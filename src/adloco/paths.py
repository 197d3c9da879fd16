"""Where each stage reads and writes, in one place.

The Snakefile, dvc.yaml and the CLI defaults all use these layouts; the README
documents them. Paths are relative to the working directory (the repository
root when run through Snakemake or DVC).
"""

from __future__ import annotations

from pathlib import Path

RAW = Path("data/raw")
TOKENIZED = Path("data/tokenized")
CALIBRATION = Path("results/calibration")
VARIANCE = Path("results/variance")
RUNS = Path("results/runs")
CHECKPOINTS = Path("results/checkpoints")
REPORT = Path("results/report")


def tokenized_dir(dataset: str) -> Path:
    return TOKENIZED / dataset


def calibration_file(device: str) -> Path:
    return CALIBRATION / f"{device}.json"


def run_dir(run: str, seed: int) -> Path:
    return RUNS / run / f"seed{seed}"


def checkpoint_dir(run: str, seed: int) -> Path:
    # Outside the run folder: Snakemake removes a failed job's declared outputs,
    # and the checkpoints must survive that so a re-run resumes.
    return CHECKPOINTS / run / f"seed{seed}"
