"""Figures of the gradient noise: B_simple along the AdLoCo runs, the variance stage's table.

PNG bytes, or None without data (:mod:`adloco.report.figures.drawing`).
"""

from __future__ import annotations

import math

from matplotlib.ticker import MaxNLocator, NullFormatter

from adloco.report.analysis.seed_stats import median
from adloco.report.figures.drawing import WIDTH_IN, plain_numbers, pyplot, to_png
from adloco.report.inputs.results import Variance

# Columns of per_batch.csv that index batches rather than measure them.
INDEX_COLUMNS = {"batch", "index", "batch_index", "seed", "step"}


def _noise_by_round(ax, mine: list[dict]) -> None:
    """Left panel: each estimate by round, its median, the smoothed one, the batch asked for."""
    done = [r for r in mine if r["determined"]]
    undetermined = [r for r in mine if not r["determined"]]
    rounds = sorted({r["round"] for r in mine})
    by_round = {k: [r["noise_scale"] for r in done if r["round"] == k] for k in rounds}
    asked = {
        k: [r["requested_global"] for r in mine
            if r["round"] == k and isinstance(r["requested_global"], (int, float))]
        for k in rounds
    }  # fmt: skip
    ax.scatter([r["round"] for r in done], [r["noise_scale"] for r in done], s=8, alpha=0.35,
               color="tab:blue", label="B_simple (each seed, trainer)")  # fmt: skip
    line = [(k, median(v)) for k, v in by_round.items() if v]
    if line:
        ax.plot(*zip(*line, strict=True), color="tab:blue", label="B_simple, median")
    smoothed = [(r["round"], r["smoothed_noise_scale"]) for r in mine
                if isinstance(r["smoothed_noise_scale"], (int, float))]  # fmt: skip
    if smoothed:
        ax.scatter(*zip(*smoothed, strict=True), s=8, marker="s", color="tab:purple",
                   alpha=0.5, label="smoothed estimate")  # fmt: skip
    asked_line = [(k, median(v)) for k, v in asked.items() if v]
    if asked_line:
        ax.plot(*zip(*asked_line, strict=True), color="tab:green", linestyle="--",
                label="batch the test asked for, median")  # fmt: skip
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(plain_numbers())
    ax.yaxis.set_minor_formatter(NullFormatter())
    if undetermined:
        ax.scatter([r["round"] for r in undetermined], [0.02] * len(undetermined),
                   transform=ax.get_xaxis_transform(), marker="x", color="firebrick", s=18,
                   label=f"undetermined (‖∇F‖² ≤ 0): {len(undetermined)}")  # fmt: skip
    ax.set_xlabel("round")
    ax.set_ylabel("sequences")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend(fontsize=7, loc="upper left")


def _noise_by_perplexity(ax, mine: list[dict]) -> None:
    """Right panel: each determined estimate against the round's run-level perplexity."""
    pts = [(r["val_perplexity"], r["noise_scale"]) for r in mine
           if r["determined"] and isinstance(r["val_perplexity"], (int, float))]  # fmt: skip
    if pts:
        ax.scatter(*zip(*pts, strict=True), s=8, alpha=0.35, color="tab:blue")
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(plain_numbers())
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.invert_xaxis()
    ax.set_xlabel("run-level validation perplexity of the round (falling to the right)")
    ax.set_ylabel("B_simple (sequences)")


def noise_figure(rows: list[dict], name: str | None) -> bytes | None:
    """B_simple of run ``name`` by round and against perplexity, with the batch the test asked for.

    Every trainer's estimate of every seed is a dot; the line is the median
    per round. Rounds whose estimate was undetermined (‖∇F‖² ≤ 0) are crosses
    on the bottom edge, so they are seen, not dropped.
    """
    mine = [r for r in rows if r["run"] == name]
    if not mine:
        return None
    plt, _ = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(WIDTH_IN, 3.6))
    _noise_by_round(axes[0], mine)
    _noise_by_perplexity(axes[1], mine)
    fig.suptitle(f"{name}: noise scale along the run", fontsize=10)
    fig.tight_layout()
    return to_png(fig)


def variance_figure(variance: Variance) -> bytes | None:
    """Histograms of the numeric columns of per_batch.csv (up to four)."""
    if not variance.per_batch:
        return None
    columns = [
        c
        for c in variance.per_batch[0]
        if c.lower() not in INDEX_COLUMNS
        and all(isinstance(row.get(c), (int, float)) for row in variance.per_batch)
        # A constant column (a batch size, say) has nothing to show as a histogram.
        and len({row[c] for row in variance.per_batch}) > 1
    ][:4]
    if not columns:
        return None
    plt, sns = pyplot()
    fig, axes = plt.subplots(1, len(columns), figsize=(WIDTH_IN, 2.8), squeeze=False)
    for ax, column in zip(axes.flat, columns, strict=True):
        values = [row[column] for row in variance.per_batch if math.isfinite(row[column])]
        sns.histplot(values, ax=ax, bins=min(30, max(5, len(values) // 3)))
        ax.set_xlabel(column.replace("_", " "))
    fig.tight_layout()
    return to_png(fig)
