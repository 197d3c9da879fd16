"""Figures of the report, drawn with seaborn on the Agg backend as PNG bytes.

Called by :func:`adloco.report.build_report`; each function returns PNG bytes,
or None when the data for that figure is absent, so the page can say so
instead of failing. Curves over seeds are the median with a min–max band:
each seed's curve is interpolated linearly onto the x values of all seeds
where every seed has data (``seed_band``). Figures are 11 inches wide at
110 dpi (1210 px), so they fit the page without scaling up.
"""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns
from matplotlib.colors import TwoSlopeNorm
from matplotlib.ticker import FuncFormatter, MaxNLocator, NullFormatter

from adloco.io import atomic_path
from adloco.report.inputs import RunSeed, Variance
from adloco.report.ladder import to_target
from adloco.report.settings import Roles
from adloco.report.stats import median
from adloco.report.summary import merges, round_values, run_level_perplexity

# Columns of per_batch.csv that index batches rather than measure them.
INDEX_COLUMNS = {"batch", "index", "batch_index", "seed", "step"}
WIDTH_IN = 11.0
DPI = 110

AXES = {
    "tokens_total": "tokens (all trainers)",
    "communications": "communications (trainer-rounds)",
    "bytes_total": "bytes communicated",
    "sim_time_s": "simulated time (s)",
}


def _pyplot():
    matplotlib.use("Agg")
    sns.set_theme(style="whitegrid", context="notebook", font_scale=0.9)
    return plt, sns


def _png(fig) -> bytes:
    buffer = io.BytesIO()
    # No Software/date metadata, so the same results give the same bytes.
    fig.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    plt.close(fig)
    return buffer.getvalue()


def write_figures(folder: Path, drawn: dict[str, bytes | None]) -> None:
    """Write each PNG atomically; remove one not drawn (it would no longer match the data)."""
    # The folder exists even when no figure could be drawn: the workflow declares it.
    folder.mkdir(parents=True, exist_ok=True)
    for name, png in drawn.items():
        path = folder / f"{name}.png"
        if png is None:
            path.unlink(missing_ok=True)
            continue
        with atomic_path(path) as tmp:
            tmp.write_bytes(png)


def _plain_numbers():
    return FuncFormatter(lambda value, _: f"{value:g}")


def _sparse_minor_numbers():
    """Labels of a log axis's minor ticks at 2 and 5 times a power of ten only (no crowding)."""

    def label(value, _):
        if value <= 0:
            return ""
        leading = round(value / 10 ** math.floor(math.log10(value)), 6)
        return f"{value:g}" if leading in (2.0, 5.0) else ""

    return FuncFormatter(label)


def _binary_units():
    def label(value, _):
        for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
            if abs(value) >= size:
                return f"{value / size:.3g} {unit}"
        return f"{value:g} B"

    return FuncFormatter(label)


# Reference perplexities and the base model: one style each, the same in every figure.
LEVEL_STYLES = {
    "uniform": ("grey", (0, (1, 3))),
    "unigram": ("firebrick", (0, (5, 3))),
    "bigram": ("darkorange", (0, (5, 3))),
    "base model": ("black", (0, (3, 1, 1, 1))),
}


def level_lines(ax, levels: dict[str, float], vertical: bool = False) -> None:
    """Reference perplexities (uniform, unigram, bigram) and the base model as labelled lines.

    A level far above the data (uniform, with a large vocabulary) would
    squash the curves: it is named in the corner instead of drawn.
    """
    low, high = ax.get_xlim() if vertical else ax.get_ylim()
    off = []
    for name, value in levels.items():
        color, style = LEVEL_STYLES.get(name, ("grey", ":"))
        if value > high * 1.5:
            off.append(f"{name} {value:.4g}")
            continue
        if vertical:
            ax.axvline(value, color=color, linestyle=style, linewidth=1)
            ax.annotate(name, (value, 1.0), xycoords=("data", "axes fraction"), fontsize=7,
                        color=color, rotation=90, ha="right", va="top")  # fmt: skip
        else:
            ax.axhline(value, color=color, linestyle=style, linewidth=1)
            ax.annotate(name, (1.0, value), xycoords=("axes fraction", "data"), fontsize=7,
                        color=color, ha="right", va="bottom")  # fmt: skip
        high = max(high, value * 1.05)
    if vertical:
        ax.set_xlim(low, max(ax.get_xlim()[1], high))
    else:
        ax.set_ylim(low, max(ax.get_ylim()[1], high))
    if off:
        ax.annotate("above: " + ", ".join(off), (0.99, 0.99), xycoords="axes fraction",
                    fontsize=7, ha="right", va="top", color="grey")  # fmt: skip


def _run_names(runs: list[RunSeed]) -> list[str]:
    return list(dict.fromkeys(r.run for r in runs))


def palette(runs: list[RunSeed]) -> dict[str, Any]:
    """One colour per run, the same in every figure."""
    _, sns = _pyplot()
    names = _run_names(runs)
    return dict(zip(names, sns.color_palette("tab10", max(len(names), 1)), strict=False))


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
    names = _run_names(runs)
    if not any(run_level_perplexity(r.rows) for r in runs):
        return None
    plt, _ = _pyplot()
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
            ax.xaxis.set_major_formatter(_binary_units())
    low, high = axes[0, 0].get_ylim()
    if low > 0 and high / low > 10:
        for ax in axes.flat:
            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(_plain_numbers())
    for ax in axes.flat:
        level_lines(ax, levels or {})
    for ax in axes[:, 0]:
        ax.set_ylabel("validation perplexity")
    _legend_on_top(fig, axes[0, 0], row_height=0.045)
    return _png(fig)


def merges_figure(
    runs: list[RunSeed], name: str | None, levels: dict[str, float] | None = None
) -> bytes | None:
    """Each trainer's perplexity against tokens for every seed of ``name``, merges marked."""
    seeds = sorted((r for r in runs if r.run == name), key=lambda r: r.seed)
    seeds = [r for r in seeds if merges(r.rows)][:4]
    if not seeds:
        return None
    plt, sns = _pyplot()
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
    return _png(fig)


def _legend_on_top(fig, ax, row_height: float) -> None:
    """``ax``'s legend above the panels, five entries a row; none when nothing was drawn."""
    handles, labels = ax.get_legend_handles_labels()
    if labels:
        fig.legend(handles, labels, loc="upper center", ncol=min(len(labels), 5), frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 1 - row_height * math.ceil(len(labels) / 5)))


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
    plt, _ = _pyplot()
    colors = palette(runs)
    names = _run_names(runs)
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
    _legend_on_top(fig, axes.flat[0], row_height=0.08)
    return _png(fig)


REGIME_STYLES = {"concurrent": "-", "time_slicing": "--"}


def regimes_figure(cells: list, target: float | None, labels: dict[str, str]) -> bytes | None:
    """AdLoCo / baseline time-to-target ratio against bandwidth, per clock model and sharing."""
    # A ratio of 0 or infinity (a run that never gets there) has no place on a log axis.
    mine = [c for c in cells if c.target == target and 0 < c.effect.estimate < math.inf]
    if not mine:
        return None
    plt, sns = _pyplot()
    against = [a for a in ("diloco", "best", "ddp") if any(c.against == a for c in mine)]
    fig, axes = plt.subplots(1, len(against), figsize=(WIDTH_IN, 4.0), squeeze=False, sharey=True)
    clocks = list(dict.fromkeys(c.clock for c in mine))
    colors = dict(zip(clocks, sns.color_palette("colorblind", len(clocks)), strict=False))
    for ax, which in zip(axes.flat, against, strict=True):
        for clock in clocks:
            for sharing, style in REGIME_STYLES.items():
                line = sorted(
                    (c for c in mine if c.against == which and c.clock == clock
                     and c.sharing == sharing),
                    key=lambda c: c.bandwidth_gbit_s,
                )  # fmt: skip
                if not line:
                    continue
                x = [c.bandwidth_gbit_s for c in line]
                y = [c.effect.estimate for c in line]
                ax.plot(x, y, style, color=colors[clock], label=f"{labels[clock]}, {sharing}")
                lo = [c.effect.interval.low if c.effect.interval else None for c in line]
                hi = [c.effect.interval.high if c.effect.interval else None for c in line]
                if all(v is not None and 0 < v < math.inf for v in lo + hi):
                    ax.fill_between(x, lo, hi, color=colors[clock], alpha=0.12, linewidth=0)
                for c in line:
                    if c.own:
                        ax.scatter(
                            c.bandwidth_gbit_s,
                            c.effect.estimate,
                            s=80,
                            marker="*",
                            color="black",
                            zorder=5,
                            label="the runs' own setting",
                        )
        ax.axhline(1.0, color="black", linewidth=1)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(_plain_numbers())
        ax.yaxis.set_minor_formatter(_sparse_minor_numbers())
        ax.set_xlabel("bandwidth (Gbit/s)")
        titles = {"diloco": "AdLoCo / DiLoCo", "best": "AdLoCo / best baseline",
                  "ddp": "AdLoCo / ddp anchor"}  # fmt: skip
        ax.set_title(titles[which], fontsize=10)
    axes.flat[0].set_ylabel("time-to-target ratio (below 1: AdLoCo faster)")
    handles, names = axes.flat[0].get_legend_handles_labels()
    unique = dict(zip(names, handles, strict=True))
    fig.legend(unique.values(), unique.keys(), loc="upper center", ncol=3, frameon=False,
               fontsize=8)  # fmt: skip
    # One legend row is about 0.2 in of the 4-in figure.
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.055 * math.ceil(len(unique) / 3) - 0.02))
    return _png(fig)


def regime_map_figure(grid, found: list) -> bytes | None:
    """AdLoCo / baseline time-to-target ratio over saturation batch and bandwidth.

    One panel per slot-sharing policy and comparison (DiLoCo, best baseline):
    colour the median paired ratio (blue below 1: AdLoCo faster), the solid
    line where it crosses 1, the dashed lines where the ends of its interval
    do (the band between them is the uncertainty over seeds), the star the
    runs' own setting.
    """
    if not grid.cells:
        return None
    plt, _ = _pyplot()

    policies = list(dict.fromkeys(c.sharing for c in grid.cells))
    against = [a for a in ("diloco", "best") if any(c.against == a for c in grid.cells)]
    fig, axes = plt.subplots(
        len(policies), len(against), figsize=(WIDTH_IN, 3.3 * len(policies)), squeeze=False,
        sharex=True, sharey=True,
    )  # fmt: skip
    bws = sorted({c.bandwidth_gbit_s for c in grid.cells})
    sats = list(grid.saturations)
    x_edges = _edges(bws)
    y_edges = _edges([float(s) for s in sats])
    logs = [
        math.log2(c.effect.estimate)
        for c in grid.cells
        if c.effect.estimate > 0 and math.isfinite(c.effect.estimate)
    ]
    span = max([abs(v) for v in logs] + [0.1])
    norm = TwoSlopeNorm(vcenter=0.0, vmin=-span, vmax=span)
    mesh = None
    for row, sharing in enumerate(policies):
        for col, which in enumerate(against):
            ax = axes[row, col]
            z = np.full((len(sats), len(bws)), np.nan)
            for c in grid.cells:
                if (c.sharing, c.against) == (sharing, which) and c.effect.estimate > 0:
                    value = math.log2(c.effect.estimate)
                    if math.isfinite(value):
                        z[sats.index(c.saturation_batch), bws.index(c.bandwidth_gbit_s)] = value
            mesh = ax.pcolormesh(x_edges, y_edges, z, cmap="RdBu_r", norm=norm, shading="flat")
            for line, style in (("median", "-"), ("low", "--"), ("high", "--")):
                pts = sorted(
                    (c.saturation_batch, c.bandwidth_gbit_s)
                    for c in found
                    if (c.sharing, c.against, c.line) == (sharing, which, line)
                )
                label = "ratio = 1" if line == "median" else "an end of its interval = 1"
                if pts:
                    ax.plot([b for _, b in pts], [s for s, _ in pts], style, color="black",
                            linewidth=1.6 if line == "median" else 0.9, marker=".",
                            label=label)  # fmt: skip
            for c in grid.cells:
                if c.own and (c.sharing, c.against) == (sharing, which):
                    ax.scatter(c.bandwidth_gbit_s, c.saturation_batch, marker="*", s=140,
                               color="gold", edgecolor="black", zorder=5,
                               label="the runs' own setting")  # fmt: skip
            ax.set_xscale("log")
            ax.set_yscale("log", base=2)
            ax.yaxis.set_major_formatter(_plain_numbers())
            ax.yaxis.set_minor_formatter(NullFormatter())
            ax.set_yticks(sats)
            title = "AdLoCo / DiLoCo" if which == "diloco" else "AdLoCo / best baseline"
            ax.set_title(f"{title}, slots {sharing.replace('_', ' ')}", fontsize=9)
            if row == len(policies) - 1:
                ax.set_xlabel("bandwidth (Gbit/s)")
            if col == 0:
                ax.set_ylabel("saturation batch (sequences)")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=True))
    fig.legend(unique.values(), unique.keys(), loc="upper center", ncol=3, frameon=False,
               fontsize=8)  # fmt: skip
    # Room above the panels' titles for the legend.
    fig.subplots_adjust(top=1 - 0.8 / (3.3 * len(policies)), right=0.86, hspace=0.3)
    bar = fig.colorbar(mesh, cax=fig.add_axes((0.89, 0.15, 0.015, 0.7)))
    nice = (0.1, 0.25, 0.5, 0.7, 0.8, 0.9, 1, 1.1, 1.25, 1.5, 2, 4, 10)
    ticks = [math.log2(r) for r in nice if abs(math.log2(r)) <= span]
    bar.set_ticks(ticks)
    bar.set_ticklabels([f"{2.0**t:.3g}" for t in ticks])
    bar.set_label("median paired ratio (below 1: AdLoCo faster)")
    return _png(fig)


def _edges(values: list[float]) -> list[float]:
    """Cell edges on a log axis: geometric midpoints, and as far again beyond each end."""
    if len(values) == 1:
        return [values[0] / 2, values[0] * 2]
    mids = [math.sqrt(a * b) for a, b in zip(values, values[1:], strict=False)]
    return [values[0] ** 2 / mids[0], *mids, values[-1] ** 2 / mids[-1]]


def batch_figure(runs: list[RunSeed], names: list[str]) -> bytes | None:
    """Requested and effective global batch per trainer over rounds, first seed of each run."""
    first = {}
    for r in sorted(runs, key=lambda r: r.seed):
        if r.run in names and r.run not in first and any("requested_batch" in x for x in r.rows):
            first[r.run] = r
    if not first:
        return None
    plt, sns = _pyplot()
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
        ax.yaxis.set_major_formatter(_plain_numbers())
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(f"{name} (seed {run.seed})", fontsize=9)
        ax.set_xlabel("round")
        ax.set_ylabel("global batch (sequences)")
        handles, labels = ax.get_legend_handles_labels()
        unique = dict(zip(labels, handles, strict=True))
        ax.legend(unique.values(), unique.keys(), fontsize=7, loc="best")
    fig.tight_layout()
    return _png(fig)


def trainers_figure(runs: list[RunSeed], names: list[str]) -> bytes | None:
    """Active trainers per round of each run, median over seeds."""
    plt, _ = _pyplot()
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
    return _png(fig)


def ablations_figure(
    runs: list[RunSeed], roles: Roles, main_target: float | None, rule: str = "stays"
) -> bytes | None:
    """Per seed: simulated time to the main target and final perplexity, AdLoCo and ablations."""
    if roles.adloco is None or not roles.ablations:
        return None
    names = [roles.adloco, *roles.ablations]
    plt, _ = _pyplot()
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
    return _png(fig)


def noise_figure(rows: list[dict], name: str | None) -> bytes | None:
    """B_simple of run ``name`` by round and against perplexity, with the batch the test asked for.

    Every trainer's estimate of every seed is a dot; the line is the median
    per round. Rounds whose estimate was undetermined (‖∇F‖² ≤ 0) are crosses
    on the bottom edge, so they are seen, not dropped.
    """
    mine = [r for r in rows if r["run"] == name]
    if not mine:
        return None
    plt, _ = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(WIDTH_IN, 3.6))
    done = [r for r in mine if r["determined"]]
    undetermined = [r for r in mine if not r["determined"]]
    rounds = sorted({r["round"] for r in mine})
    by_round = {k: [r["noise_scale"] for r in done if r["round"] == k] for k in rounds}
    asked = {
        k: [r["requested_global"] for r in mine
            if r["round"] == k and isinstance(r["requested_global"], (int, float))]
        for k in rounds
    }  # fmt: skip
    ax = axes[0]
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
    ax.yaxis.set_major_formatter(_plain_numbers())
    ax.yaxis.set_minor_formatter(NullFormatter())
    if undetermined:
        ax.scatter([r["round"] for r in undetermined], [0.02] * len(undetermined),
                   transform=ax.get_xaxis_transform(), marker="x", color="firebrick", s=18,
                   label=f"undetermined (‖∇F‖² ≤ 0): {len(undetermined)}")  # fmt: skip
    ax.set_xlabel("round")
    ax.set_ylabel("sequences")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend(fontsize=7, loc="upper left")
    ax = axes[1]
    pts = [(r["val_perplexity"], r["noise_scale"]) for r in done
           if isinstance(r["val_perplexity"], (int, float))]  # fmt: skip
    if pts:
        ax.scatter(*zip(*pts, strict=True), s=8, alpha=0.35, color="tab:blue")
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(_plain_numbers())
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.invert_xaxis()
    ax.set_xlabel("run-level validation perplexity of the round (falling to the right)")
    ax.set_ylabel("B_simple (sequences)")
    fig.suptitle(f"{name}: noise scale along the run", fontsize=10)
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
    fig, axes = plt.subplots(1, len(columns), figsize=(WIDTH_IN, 2.8), squeeze=False)
    for ax, column in zip(axes.flat, columns, strict=True):
        values = [row[column] for row in variance.per_batch if math.isfinite(row[column])]
        sns.histplot(values, ax=ax, bins=min(30, max(5, len(values) // 3)))
        ax.set_xlabel(column.replace("_", " "))
    fig.tight_layout()
    return _png(fig)
