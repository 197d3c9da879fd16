"""Figures of the runs: perplexity curves, merges, the target ladder, batches, trainers, ablations.

Curves over seeds are the median with a min–max band: each seed's curve is
interpolated linearly onto the x values of all seeds where every seed has
data (:func:`seed_band`). Each function returns PNG bytes, or None when its
data are absent (:mod:`adloco.report.figures.drawing`).
"""

from __future__ import annotations

import math

import numpy as np
from matplotlib.ticker import MaxNLocator, NullFormatter

from adloco.report.analysis.ladder import to_target
from adloco.report.analysis.seed_stats import median
from adloco.report.analysis.summary import merges, round_values, run_level_perplexity
from adloco.report.figures.drawing import (
    WIDTH_IN,
    binary_units,
    legend_on_top,
    level_lines,
    palette,
    plain_numbers,
    pyplot,
    run_names,
    to_png,
)
from adloco.report.inputs.results import RunSeed
from adloco.report.settings import DEFAULT_RULE, ReachRule, Roles

AXES = {
    "tokens_total": "tokens (all trainers)",
    "communications": "communications (trainer-rounds)",
    "bytes_total": "bytes communicated",
    "sim_time_s": "simulated time (s)",
}


def _strict(xs: list[float], ys: list[float]) -> tuple[list[float], list[float]]:
    """Keep the last y of repeated x values, so x increases strictly."""
    out: dict[float, float] = {}
    for x, y in zip(xs, ys, strict=True):
        out[x] = y
    return list(out), list(out.values())


def seed_curves(runs: list[RunSeed], name: str, x_key: str) -> list[tuple[list, list]]:
    """Per seed of run ``name``: (x, run-level perplexity) at its evaluated rounds."""
    out = []
    for r in sorted((r for r in runs if r.run == name), key=lambda r: r.seed):
        xs = round_values(r.rows, x_key)
        points = [(xs[k], p) for k, p in run_level_perplexity(r.rows).items() if k in xs]
        if points:
            out.append(_strict(*map(list, zip(*points, strict=True))))
    return out


def seed_band(curves: list[tuple[list, list]]) -> tuple[list, list, list, list] | None:
    """(x, median, min, max) over seeds on the x values where every seed has data."""
    curves = [c for c in curves if c[0]]
    if not curves:
        return None
    if len(curves) == 1:
        x, y = curves[0]
        return x, y, y, y
    lo = max(c[0][0] for c in curves)
    hi = min(c[0][-1] for c in curves)
    grid = sorted({x for c in curves for x in c[0] if lo <= x <= hi})
    if not grid:
        return None
    stacked = np.array([np.interp(grid, c[0], c[1]) for c in curves])
    return (
        grid,
        list(np.median(stacked, axis=0)),
        list(stacked.min(axis=0)),
        list(stacked.max(axis=0)),
    )


def curves_figure(
    runs: list[RunSeed], main_target: float | None, levels: dict[str, float] | None = None
) -> bytes | None:
    """Run-level perplexity against tokens, communications, bytes and simulated time.

    ``levels``: reference perplexities and the base model's, drawn as lines.
    """
    names = run_names(runs)
    if not any(run_level_perplexity(r.rows) for r in runs):
        return None
    plt, _ = pyplot()
    colors = palette(runs)
    fig, axes = plt.subplots(2, 2, figsize=(WIDTH_IN, 7.4), sharey=True)
    for ax, (key, label) in zip(axes.flat, AXES.items(), strict=True):
        for name in names:
            band = seed_band(seed_curves(runs, name, key))
            if band is None:
                continue
            x, mid, low, high = band
            ax.plot(x, mid, color=colors[name], label=name, linewidth=1.4)
            if low != high:
                ax.fill_between(x, low, high, color=colors[name], alpha=0.15, linewidth=0)
            # Merges: a triangle at the run-level perplexity of each seed's merge round.
            for r in runs:
                if r.run != name:
                    continue
                xs, ppl = round_values(r.rows, key), run_level_perplexity(r.rows)
                for m in merges(r.rows):
                    if m["round"] in xs and m["round"] in ppl:
                        ax.scatter(
                            xs[m["round"]], ppl[m["round"]], marker="v", s=28,
                            color=colors[name], edgecolor="black", linewidth=0.5, zorder=4,
                        )  # fmt: skip
        if main_target is not None:
            ax.axhline(main_target, color="black", linestyle=":", linewidth=1)
        ax.set_xlabel(label)
        if key == "bytes_total":
            ax.xaxis.set_major_formatter(binary_units())
    low, high = axes[0, 0].get_ylim()
    if low > 0 and high / low > 10:
        for ax in axes.flat:
            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(plain_numbers())
    for ax in axes.flat:
        level_lines(ax, levels or {})
    for ax in axes[:, 0]:
        ax.set_ylabel("validation perplexity")
    legend_on_top(fig, axes[0, 0], row_height=0.045)
    return to_png(fig)


def merges_figure(
    runs: list[RunSeed], name: str | None, levels: dict[str, float] | None = None
) -> bytes | None:
    """Each trainer's perplexity against tokens for every seed of ``name``, merges marked."""
    seeds = sorted((r for r in runs if r.run == name), key=lambda r: r.seed)
    seeds = [r for r in seeds if merges(r.rows)][:4]
    if not seeds:
        return None
    plt, sns = pyplot()
    fig, axes = plt.subplots(1, len(seeds), figsize=(WIDTH_IN, 3.4), squeeze=False, sharey=True)
    for ax, r in zip(axes.flat, seeds, strict=True):
        tokens = round_values(r.rows, "tokens_total")
        trainers = sorted({row["trainer"] for row in r.rows})
        colors = dict(zip(trainers, sns.color_palette("tab10", len(trainers)), strict=False))
        for t in trainers:
            pts = sorted(
                (row["round"], row["val_perplexity"])
                for row in r.rows
                if row["trainer"] == t and isinstance(row.get("val_perplexity"), (int, float))
            )
            if pts:
                ax.plot([tokens[k] for k, _ in pts], [p for _, p in pts], marker=".",
                        color=colors[t], label=f"trainer {t}")  # fmt: skip
        for m in merges(r.rows):
            ax.axvline(tokens[m["round"]], color="grey", linestyle=":", linewidth=1)
            if m["after"] is not None:
                ax.scatter(tokens[m["after_round"]], m["after"], s=90, facecolor="none",
                           edgecolor="black", linewidth=1.2, zorder=5)  # fmt: skip
        ax.set_title(f"{name}, seed {r.seed}", fontsize=9)
        ax.set_xlabel("tokens (all trainers)")
        # Thousands, so that the ticks of three narrow panels do not run together.
        ax.xaxis.set_major_formatter(lambda x, _pos: f"{x / 1000:g}k")
        ax.legend(fontsize=7, loc="upper right")
    for ax in axes.flat:
        level_lines(ax, levels or {})
    axes.flat[0].set_ylabel("validation perplexity")
    fig.tight_layout()
    return to_png(fig)


def ladder_figure(
    runs: list[RunSeed],
    table: dict,
    targets: tuple[float, ...],
    quantities: dict[str, str],
    references: dict[str, float] | None = None,
) -> bytes | None:
    """Median (min–max) of each quantity to target, against the target, per run."""
    if not targets:
        return None
    plt, _ = pyplot()
    colors = palette(runs)
    names = run_names(runs)
    fig, axes = plt.subplots(1, len(quantities), figsize=(WIDTH_IN, 3.2), squeeze=False)
    for ax, (q, label) in zip(axes.flat, quantities.items(), strict=True):
        for i, name in enumerate(names):
            xs, mids, errs = [], [], [[], []]
            for t in targets:
                s = table[(t, name)][q]
                if math.isfinite(s.median):
                    # A small offset per run keeps overlapping error bars apart.
                    xs.append(t * (1 + 0.004 * (i - len(names) / 2)))
                    mids.append(s.median)
                    errs[0].append(s.median - s.low)
                    errs[1].append((s.high if math.isfinite(s.high) else s.median) - s.median)
            if xs:
                ax.errorbar(xs, mids, yerr=errs, color=colors[name], marker="o", markersize=3,
                            capsize=2, linewidth=1, label=name)  # fmt: skip
        level_lines(ax, {k: v for k, v in (references or {}).items() if k != "uniform"}, True)
        ax.invert_xaxis()
        ax.set_xlabel("target perplexity (harder to the right)")
        ax.set_ylabel(label)
    legend_on_top(fig, axes.flat[0], row_height=0.08)
    return to_png(fig)


def batch_figure(runs: list[RunSeed], names: list[str]) -> bytes | None:
    """Requested and effective global batch per trainer over rounds, first seed of each run."""
    first = {}
    for r in sorted(runs, key=lambda r: r.seed):
        if r.run in names and r.run not in first and any("requested_batch" in x for x in r.rows):
            first[r.run] = r
    if not first:
        return None
    plt, sns = pyplot()
    cols = min(len(first), 3)
    rows_n = math.ceil(len(first) / cols)
    fig, axes = plt.subplots(rows_n, cols, figsize=(WIDTH_IN, 3.0 * rows_n), squeeze=False)
    for ax in axes.flat[len(first) :]:
        ax.set_visible(False)
    for ax, (name, run) in zip(axes.flat, first.items(), strict=False):
        trainers = sorted({row["trainer"] for row in run.rows})
        colors = dict(zip(trainers, sns.color_palette("tab10", len(trainers)), strict=False))
        for t in trainers:
            mine = sorted((x for x in run.rows if x["trainer"] == t), key=lambda x: x["round"])
            req = [(x["round"], x["requested_batch"]) for x in mine if x.get("requested_batch")]
            eff = [(x["round"], x["effective_batch"]) for x in mine if x.get("effective_batch")]
            if req:
                ax.plot(*zip(*req, strict=True), color=colors[t], marker=".",
                        label=f"trainer {t}")  # fmt: skip
            if eff:
                ax.plot(*zip(*eff, strict=True), color=colors[t], linestyle="--")
            for mode, marker in (("accumulate", "o"), ("capped", "v")):
                hits = [
                    (x["round"], x["effective_batch"])
                    for x in mine
                    if x.get("switch_mode") == mode and x.get("effective_batch")
                ]
                if hits:
                    ax.scatter(*zip(*hits, strict=True), marker=marker, color=colors[t],
                               zorder=3, label=mode)  # fmt: skip
        for m in merges(run.rows):
            ax.axvline(m["round"], color="grey", linestyle=":")
        ax.set_yscale("log", base=2)
        ax.yaxis.set_major_formatter(plain_numbers())
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(f"{name} (seed {run.seed})", fontsize=9)
        ax.set_xlabel("round")
        ax.set_ylabel("global batch (sequences)")
        handles, labels = ax.get_legend_handles_labels()
        unique = dict(zip(labels, handles, strict=True))
        ax.legend(unique.values(), unique.keys(), fontsize=7, loc="best")
    fig.tight_layout()
    return to_png(fig)


def trainers_figure(runs: list[RunSeed], names: list[str]) -> bytes | None:
    """Active trainers per round of each run, median over seeds."""
    plt, _ = pyplot()
    colors = palette(runs)
    drawn = False
    fig, ax = plt.subplots(figsize=(WIDTH_IN, 2.4))
    for name in names:
        per_seed = []
        for r in runs:
            if r.run == name:
                per_round = round_values(r.rows, "active_trainers")
                per_seed.append(per_round)
        rounds = sorted({k for p in per_seed for k in p})
        if not rounds or max(v for p in per_seed for v in p.values()) < 2:
            continue
        med = [float(np.median([p[k] for p in per_seed if k in p])) for k in rounds]
        ax.step(rounds, med, where="post", color=colors[name], label=name)
        drawn = True
    if not drawn:
        plt.close(fig)
        return None
    ax.set_xlabel("round")
    ax.set_ylabel("active trainers")
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return to_png(fig)


def ablations_figure(
    runs: list[RunSeed],
    roles: Roles,
    main_target: float | None,
    rule: ReachRule | str = DEFAULT_RULE,
) -> bytes | None:
    """Per seed: simulated time to the main target and final perplexity, AdLoCo and ablations."""
    if roles.adloco is None or not roles.ablations:
        return None
    names = [roles.adloco, *roles.ablations]
    plt, _ = pyplot()
    colors = palette(runs)
    fig, axes = plt.subplots(1, 2, figsize=(WIDTH_IN, 3.0 + 0.12 * len(names)))
    for ax, key in zip(axes, ("time", "final"), strict=True):
        for i, name in enumerate(names):
            if key == "time":
                values = (
                    list(to_target(runs, name, main_target, "sim_time_s", rule).values())
                    if main_target
                    else []
                )
            else:
                values = [
                    r.summary.get("final_val_perplexity") or math.nan
                    for r in sorted((r for r in runs if r.run == name), key=lambda r: r.seed)
                ]
            done = [v for v in values if math.isfinite(v)]
            ax.scatter(done, [i] * len(done), color=colors[name], s=30, zorder=3)
            if done:
                mid = median(done)
                ax.plot([mid, mid], [i - 0.3, i + 0.3], color="black", linewidth=1.5)
            missed = len(values) - len(done)
            if missed:
                ax.annotate(f"{missed} seed(s) never reached it", (1.0, i),
                            xycoords=("axes fraction", "data"), ha="right", va="center",
                            fontsize=7, color="firebrick")  # fmt: skip
        ax.set_yticks(range(len(names)), names)
        ax.set_ylim(len(names) - 0.5, -0.5)
        ax.set_xlabel(
            f"simulated time to perplexity {main_target:.4g} (s)"
            if key == "time" and main_target
            else "final validation perplexity (same token budget)"
        )
    fig.tight_layout()
    return to_png(fig)
