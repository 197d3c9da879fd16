"""What ``adloco variance`` writes: the deviations' histogram and the output folder."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import matplotlib
import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from adloco.core import paths
from adloco.core.io import atomic_dir, naming_output, write_json_atomic
from adloco.variance.analysis import VarianceAnalysis
from adloco.variance.reductions import ESTIMATORS, SPREAD_QUANTITIES

# What this stage writes into its folder.
VARIANCE_FILES = tuple(
    f(".").name
    for f in (
        paths.variance_summary_file,
        paths.variance_per_batch_file,
        paths.variance_draws_file,
        paths.variance_deviations_file,
    )
)
# draws.csv's header (reductions.draw_row's keys), written also when there are no draws.
DRAW_COLUMNS = ("draw", *(f"{q}_{name}" for name in ESTIMATORS for q in SPREAD_QUANTITIES))
# The writer named in --out's manifest (adloco.core.io.check_replaceable).
WRITER = "adloco variance"


def plot_deviations(per_batch: list[dict[str, Any]], summary: dict[str, Any], path: Path) -> None:
    """Histogram of ‖g_B − ∇F‖ with the mean and the theoretical RMS marked, as PNG."""
    matplotlib.use("Agg")
    deviations = [row["deviation"] for row in per_batch]
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    sns.histplot(deviations, ax=ax, bins=min(30, max(5, len(deviations) // 3)), color="#4c72b0")
    ax.axvline(summary["mean_deviation"], color="black", linestyle="-", label="mean")
    ax.axvline(summary["rms_deviation"], color="grey", linestyle=":", label="RMS (measured)")
    ax.axvline(
        summary["theoretical_rms_deviation"],
        color="#c44e52",
        linestyle="--",
        label="√(tr Σ (1 − b/n) / b), expected RMS",
    )
    ax.set_xlabel("‖g_B − ∇F‖")
    ax.set_ylabel("batches")
    ax.set_title(
        f"{summary['num_batches']} batches of {summary['batch_size']} from "
        f"{summary['eval_sequences']} sequences",
        fontsize=10,
    )
    ax.legend()
    fig.tight_layout()
    # Drawn in memory, then written: a failed write (a full disk) is then an
    # OSError naming the file, where Pillow writing to the file itself fails
    # with an AttributeError of its own.
    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, format="png", dpi=120)
    finally:
        plt.close(fig)
    with naming_output(path):
        path.write_bytes(buffer.getvalue())


def write_outputs(analysis: VarianceAnalysis, out_dir: str | Path) -> None:
    """variance.json, per_batch.csv, draws.csv and deviations.png: the folder, atomically.

    All of them or none: a failed write (a full disk) leaves the previous
    folder as it was, never new tables beside an old variance.json. draws.csv
    (one row per draw of the scalar-vs-pooled comparison) is written always,
    its header alone when the comparison was skipped: the folder then holds
    the same files whatever the settings, as a pipeline that declares each of
    them (dvc.yaml) needs.
    """
    tables = {
        paths.variance_per_batch_file: pd.DataFrame(analysis.per_batch),
        paths.variance_draws_file: pd.DataFrame(analysis.draws)
        if analysis.draws
        else pd.DataFrame(columns=list(DRAW_COLUMNS)),
    }
    with atomic_dir(out_dir, WRITER, "--out") as tmp:
        for file_in, frame in tables.items():
            with naming_output(file_in(tmp)):
                frame.to_csv(file_in(tmp), index=False)
        plot_deviations(analysis.per_batch, analysis.summary, paths.variance_deviations_file(tmp))
        write_json_atomic(paths.variance_summary_file(tmp), analysis.summary)
