"""Figures of the report, drawn with seaborn on the Agg backend as PNG bytes.

Called by :func:`adloco.report.run`; each function takes the loaded runs (or
the variance results) and returns PNG bytes, or None when the data for that
figure is absent, so the page can say so instead of failing. With several
seeds a curve is the mean over seeds with a min-max band.
"""

from __future__ import annotations

import io
import math
from typing import Any

from adloco.records import finite_or_none
from adloco.report.inputs import RunSeed, Variance
from adloco.report.summary import Roles, Target, round_values, run_level_perplexity, time_to_target

# Columns of per_batch.csv that index batches rather than measure them.
INDEX_COLUMNS = {"batch", "index", "batch_index", "seed", "step"}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    sns.set_theme(style="whitegrid", context="notebook")
    return plt, sns


def _png(fig) -> bytes:
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    # No Software/date metadata, so the same results give the same bytes.
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    return buffer.getvalue()


def _integer_rounds(ax) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _plain_numbers():
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda value, _: f"{value:g}")


def _run_names(runs: list[RunSeed]) -> list[str]:
    return list(dict.fromkeys(r.run for r in runs))


def _palette(runs: list[RunSeed]) -> dict[str, Any]:
    """One colour per run, the same in every figure."""
    _, sns = _pyplot()
    names = _run_names(runs)
    return dict(zip(names, sns.color_palette("tab10", max(len(names), 1)), strict=False))


def curve_over_seeds(runs: list[RunSeed], name: str, x_key: str) -> list[tuple[float, ...]]:
    """(x mean, y mean, y min, y max) per evaluated round over the seeds of run ``name``.

    Rounds are aligned across seeds; x (tokens, communications, simulated
    time) is averaged because adaptive runs differ per seed.
    """
    by_round: dict[int, list[tuple[float, float]]] = {}
    for r in runs:
        if r.run != name:
            continue
        xs = round_values(r.rows, x_key)
        for round_, ppl in run_level_perplexity(r.rows).items():
            if round_ in xs:
                by_round.setdefault(round_, []).append((xs[round_], ppl))
    out = []
    for round_ in sorted(by_round):
        xs, ys = zip(*by_round[round_], strict=True)
        out.append((sum(xs) / len(xs), sum(ys) / len(ys), min(ys), max(ys)))
    return out


def perplexity_figure(runs: list[RunSeed], target: Target) -> bytes | None:
    """Validation perplexity against tokens, communications and simulated time."""
    names = _run_names(runs)
    curves = {
        (name, key): curve_over_seeds(runs, name, key)
        for name in names
        for key in ("tokens_total", "communications", "sim_time_s")
    }
    if not any(curves.values()):
        return None
    plt, _ = _pyplot()
    colors = _palette(runs)
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2), sharey=True)
    labels = ("tokens (all trainers)", "communications (trainer-rounds)", "simulated time (s)")
    for ax, key, label in zip(
        axes, ("tokens_total", "communications", "sim_time_s"), labels, strict=True
    ):
        for name in names:
            points = curves[(name, key)]
            if not points:
                continue
            x, y, lo, hi = zip(*points, strict=True)
            ax.plot(x, y, marker=".", color=colors[name], label=name)
            if any(a != b for a, b in zip(lo, hi, strict=True)):
                ax.fill_between(x, lo, hi, color=colors[name], alpha=0.2, linewidth=0)
        if target.value is not None:
            ax.axhline(target.value, color="black", linestyle=":", linewidth=1, label="target")
        ax.set_xlabel(label)
    # Log scale only when perplexity spans more than a decade; then plain numbers on it.
    low, high = axes[0].get_ylim()
    if low > 0 and high / low > 10:
        for ax in axes:
            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(_plain_numbers())
    axes[0].set_ylabel("validation perplexity")
    handles, legend_labels = axes[0].get_legend_handles_labels()
    fig.legend(
        handles,
        legend_labels,
        loc="upper center",
        ncol=min(len(legend_labels), 8),
        bbox_to_anchor=(0.5, 1.08),
        frameon=False,
    )
    return _png(fig)


def _merge_rounds(rows: list[dict]) -> list[int]:
    return sorted(
        {
            r["round"]
            for r in rows
            for e in (r.get("events") or [])
            if isinstance(e, dict) and e.get("type") == "merge"
        }
    )


def batch_figure(runs: list[RunSeed]) -> bytes | None:
    """Requested and effective global batch per trainer over rounds, first seed of each run."""
    first = {}
    for r in runs:
        if r.run not in first and any("requested_batch" in row for row in r.rows):
            first[r.run] = r
    if not first:
        return None
    plt, sns = _pyplot()
    from matplotlib.ticker import NullFormatter

    cols = min(len(first), 2)
    rows_n = math.ceil(len(first) / cols)
    fig, axes = plt.subplots(rows_n, cols, figsize=(7 * cols, 3.4 * rows_n), squeeze=False)
    for ax in axes.flat[len(first) :]:
        ax.set_visible(False)
    for ax, (name, run) in zip(axes.flat, first.items(), strict=False):
        trainers = sorted({row["trainer"] for row in run.rows})
        colors = dict(zip(trainers, sns.color_palette("tab10", len(trainers)), strict=False))
        for t in trainers:
            mine = sorted(
                (row for row in run.rows if row["trainer"] == t), key=lambda x: x["round"]
            )
            req = [(x["round"], x["requested_batch"]) for x in mine if x.get("requested_batch")]
            eff = [(x["round"], x["effective_batch"]) for x in mine if x.get("effective_batch")]
            if req:
                ax.plot(
                    *zip(*req, strict=True),
                    color=colors[t],
                    marker=".",
                    label=f"trainer {t} requested",
                )
            if eff:
                ax.plot(
                    *zip(*eff, strict=True),
                    color=colors[t],
                    linestyle="--",
                    label=f"trainer {t} effective",
                )
            for mode, marker in (("accumulate", "o"), ("capped", "v")):
                hits = [
                    (x["round"], x["effective_batch"])
                    for x in mine
                    if x.get("switch_mode") == mode and x.get("effective_batch")
                ]
                if hits:
                    ax.scatter(
                        *zip(*hits, strict=True),
                        marker=marker,
                        color=colors[t],
                        zorder=3,
                        label=mode,
                    )
        for i, m in enumerate(_merge_rounds(run.rows)):
            ax.axvline(m, color="grey", linestyle=":", label="merge" if i == 0 else None)
        ax.set_yscale("log", base=2)
        ax.yaxis.set_major_formatter(_plain_numbers())
        ax.yaxis.set_minor_formatter(NullFormatter())
        _integer_rounds(ax)
        ax.set_title(f"{name} (seed {run.seed})")
        ax.set_xlabel("round")
        ax.set_ylabel("global batch (sequences per step)")
        handles, labels = ax.get_legend_handles_labels()
        unique = dict(zip(labels, handles, strict=True))
        ax.legend(unique.values(), unique.keys(), fontsize=7, loc="best")
    fig.tight_layout()
    return _png(fig)


def active_trainers_figure(runs: list[RunSeed]) -> bytes | None:
    """Trainers alive per round, each run; min-max band over seeds."""
    import pandas as pd

    records = []
    for r in runs:
        per_round: dict[int, int] = {}
        for row in r.rows:
            if isinstance(row.get("active_trainers"), int):
                per_round[row["round"]] = row["active_trainers"]
            else:
                per_round[row["round"]] = per_round.get(row["round"], 0) + 1
        records += [
            {"run": r.run, "seed": r.seed, "round": k, "trainers": v} for k, v in per_round.items()
        ]
    if not records:
        return None
    plt, sns = _pyplot()
    frame = pd.DataFrame.from_records(records)
    fig, ax = plt.subplots(figsize=(7, 3.6))
    sns.lineplot(
        data=frame,
        x="round",
        y="trainers",
        hue="run",
        style="run",
        palette=_palette(runs),
        errorbar=("pi", 100),
        drawstyle="steps-post",
        ax=ax,
    )
    ax.set_ylabel("active trainers")
    ax.yaxis.get_major_locator().set_params(integer=True)
    _integer_rounds(ax)
    ax.legend(fontsize=8)
    return _png(fig)


def ablation_figure(runs: list[RunSeed], roles: Roles, target: Target) -> bytes | None:
    """Final perplexity and communications to target: full AdLoCo against each ablation."""
    if roles.adloco is None or not roles.ablations:
        return None
    names = [roles.adloco, *roles.ablations]
    plt, sns = _pyplot()
    colors = _palette(runs)
    fig, axes = plt.subplots(1, 2, figsize=(12, 3.8 + 0.1 * len(names)))
    for ax, key in zip(axes, ("final", "comms"), strict=True):
        for i, name in enumerate(names):
            seeds = [r for r in runs if r.run == name]
            if key == "final":
                values = [finite_or_none(r.summary.get("final_val_perplexity")) for r in seeds]
            elif target.value is None:
                values = [None]
            else:
                reached = [time_to_target(r.rows, target.value) for r in seeds]
                values = [x["communications"] if x else None for x in reached]
            done = [v for v in values if v is not None]
            if len(done) == len(values) and done:
                mean = sum(done) / len(done)
                ax.bar(
                    i,
                    mean,
                    color=colors[name],
                    yerr=[[mean - min(done)], [max(done) - mean]] if len(done) > 1 else None,
                    capsize=4,
                )
                # Above the error bar, so the label stays readable.
                ax.text(i, max(done), f"{mean:.4g}", ha="center", va="bottom", fontsize=8)
            else:
                missing = (
                    "no target"
                    if target.value is None and key == "comms"
                    else (
                        f"not reached in\n{len(values) - len(done)} of {len(values)} seeds"
                        if key == "comms"
                        else "not evaluated"
                    )
                )
                ax.text(
                    i,
                    0.05,
                    missing,
                    ha="center",
                    va="bottom",
                    fontsize=8,
                    transform=ax.get_xaxis_transform(),
                )
        ax.set_xticks(range(len(names)), names, rotation=20, ha="right")
        ax.set_xlim(-0.6, len(names) - 0.4)
        ax.set_ylabel(
            "final validation perplexity" if key == "final" else "communications to target"
        )
    fig.tight_layout()
    return _png(fig)


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
    plt, sns = _pyplot()
    fig, axes = plt.subplots(1, len(columns), figsize=(4.2 * len(columns), 3.4), squeeze=False)
    for ax, column in zip(axes.flat, columns, strict=True):
        values = [row[column] for row in variance.per_batch if math.isfinite(row[column])]
        sns.histplot(values, ax=ax, bins=min(30, max(5, len(values) // 3)))
        ax.set_xlabel(column)
    fig.tight_layout()
    return _png(fig)
