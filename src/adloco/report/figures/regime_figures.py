"""Figures of the regime sweeps: the ratio against bandwidth, and the regime map.

:func:`regimes_figure` draws AdLoCo / baseline time-to-target ratios of the
clock-model sweep against bandwidth (lines; each brought network a point
apart from them, at its own latency); :func:`regime_map_figure` the map over
saturation batch and bandwidth with the lines where the ratio crosses 1
(:mod:`adloco.report.analysis.regime_map`). PNG bytes, or None without data.
"""

from __future__ import annotations

import math

import numpy as np
from matplotlib.colors import TwoSlopeNorm
from matplotlib.ticker import NullFormatter

from adloco.report.analysis.regime_replay import Regimes
from adloco.report.figures.drawing import (
    WIDTH_IN,
    plain_numbers,
    pyplot,
    sparse_minor_numbers,
    to_png,
)

REGIME_STYLES = {"concurrent": "-", "time_slicing": "--"}
# One marker per brought network: drawn as points beside the sweep's lines, never on them.
NETWORK_MARKERS = ("o", "s", "^", "D", "v", "P", "X")
REGIME_TITLES = {"diloco": "AdLoCo / DiLoCo", "best": "AdLoCo / best baseline",
                 "ddp": "AdLoCo / ddp anchor"}  # fmt: skip


def _sweep_lines(ax, cells: list, clock: str, color, label: str) -> None:
    """One clock's ratio against the swept bandwidths, per sharing policy, with its band."""
    for sharing, style in REGIME_STYLES.items():
        line = sorted(
            (c for c in cells if c.clock == clock and c.sharing == sharing and not c.network),
            key=lambda c: c.bandwidth_gbit_s,
        )
        if not line:
            continue
        x = [c.bandwidth_gbit_s for c in line]
        y = [c.effect.estimate for c in line]
        ax.plot(x, y, style, color=color, label=f"{label}, {sharing}")
        lo = [c.effect.interval.low if c.effect.interval else None for c in line]
        hi = [c.effect.interval.high if c.effect.interval else None for c in line]
        if all(v is not None and 0 < v < math.inf for v in lo + hi):
            ax.fill_between(x, lo, hi, color=color, alpha=0.12, linewidth=0)
        for c in line:
            if c.own:
                ax.scatter(c.bandwidth_gbit_s, c.effect.estimate, s=80, marker="*",
                           color="black", zorder=5, label="the runs' own setting")  # fmt: skip


def _named_networks(ax, cells: list, colors: dict, markers: dict) -> None:
    """Each brought network's ratio as a point at its bandwidth, apart from the sweep.

    A brought network has its own latency, so joining it to the sweep's line
    (drawn at the cluster's latency) would make the line jump there. Filled:
    slots concurrent; open: time slicing.
    """
    for c in cells:
        if not c.network:
            continue
        filled = c.sharing == "concurrent"
        ax.scatter(
            c.bandwidth_gbit_s, c.effect.estimate, s=36, marker=markers[c.network],
            color=colors[c.clock] if filled else "none", edgecolors=colors[c.clock],
            linewidths=1.2, zorder=4,
        )  # fmt: skip


def _network_legend(ax, cells: list, markers: dict) -> None:
    """Legend entries for the brought networks: the marker, the name, bandwidth and latency."""
    for name, marker in markers.items():
        c = next(c for c in cells if c.network == name)
        ax.scatter([], [], marker=marker, color="gray",
                   label=f"{name} ({c.bandwidth_gbit_s:g} Gbit/s, {c.latency_s:g} s)")  # fmt: skip


def regimes_figure(cells: list, target: float | None, labels: dict[str, str]) -> bytes | None:
    """AdLoCo / baseline time-to-target ratio against bandwidth, per clock model and sharing.

    The bandwidth sweep (at the cluster's latency) is drawn as lines; each
    brought network (``network`` named) as points apart from them.
    """
    # A ratio of 0 or infinity (a run that never gets there) has no place on a log axis.
    mine = [c for c in cells if c.target == target and 0 < c.effect.estimate < math.inf]
    if not mine:
        return None
    plt, sns = pyplot()
    against = [a for a in REGIME_TITLES if any(c.against == a for c in mine)]
    fig, axes = plt.subplots(1, len(against), figsize=(WIDTH_IN, 4.0), squeeze=False, sharey=True)
    clocks = list(dict.fromkeys(c.clock for c in mine))
    colors = dict(zip(clocks, sns.color_palette("colorblind", len(clocks)), strict=False))
    names = list(dict.fromkeys(c.network for c in mine if c.network))
    markers = {n: NETWORK_MARKERS[i % len(NETWORK_MARKERS)] for i, n in enumerate(names)}
    for ax, which in zip(axes.flat, against, strict=True):
        panel = [c for c in mine if c.against == which]
        for clock in clocks:
            _sweep_lines(ax, panel, clock, colors[clock], labels[clock])
        _named_networks(ax, panel, colors, markers)
        ax.axhline(1.0, color="black", linewidth=1)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(plain_numbers())
        ax.yaxis.set_minor_formatter(sparse_minor_numbers())
        ax.set_xlabel("bandwidth (Gbit/s)")
        ax.set_title(REGIME_TITLES[which], fontsize=10)
    _network_legend(axes.flat[0], mine, markers)
    axes.flat[0].set_ylabel("time-to-target ratio\n(below 1: AdLoCo faster)")
    handles, entries = axes.flat[0].get_legend_handles_labels()
    unique = dict(zip(entries, handles, strict=True))
    fig.legend(unique.values(), unique.keys(), loc="upper center", ncol=3, frameon=False,
               fontsize=8)  # fmt: skip
    # One legend row is about 0.2 in of the 4-in figure.
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.055 * math.ceil(len(unique) / 3) - 0.02))
    return to_png(fig)


def _log_span(cells: list) -> float:
    """The largest |log2 ratio| of the map's cells (at least 0.1): the colour scale's half-width."""
    logs = [
        math.log2(c.effect.estimate)
        for c in cells
        if c.effect.estimate > 0 and math.isfinite(c.effect.estimate)
    ]
    return max([abs(v) for v in logs] + [0.1])


def _panel_values(cells: list, sharing: str, which: str, sats: list, bws: list) -> np.ndarray:
    """log2 of each cell's median ratio, saturation by bandwidth; NaN where none is finite."""
    z = np.full((len(sats), len(bws)), np.nan)
    for c in cells:
        if (c.sharing, c.against) == (sharing, which) and c.effect.estimate > 0:
            value = math.log2(c.effect.estimate)
            if math.isfinite(value):
                z[sats.index(c.saturation_batch), bws.index(c.bandwidth_gbit_s)] = value
    return z


def _crossing_lines(ax, found: list, sharing: str, which: str) -> None:
    """Where the median ratio (solid) and the ends of its interval (dashed) cross 1."""
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


def _own_setting(ax, cells: list, sharing: str, which: str) -> None:
    """A star at the runs' own saturation batch and bandwidth."""
    for c in cells:
        if c.own and (c.sharing, c.against) == (sharing, which):
            ax.scatter(c.bandwidth_gbit_s, c.saturation_batch, marker="*", s=140,
                       color="gold", edgecolor="black", zorder=5,
                       label="the runs' own setting")  # fmt: skip


def _map_axes(ax, sats: list, sharing: str, which: str, bottom: bool, left: bool) -> None:
    """Log axes, the saturation batches as ticks, the panel's title and labels."""
    ax.set_xscale("log")
    ax.set_yscale("log", base=2)
    ax.yaxis.set_major_formatter(plain_numbers())
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_yticks(sats)
    title = REGIME_TITLES[which]
    ax.set_title(f"{title}, slots {sharing.replace('_', ' ')}", fontsize=9)
    if bottom:
        ax.set_xlabel("bandwidth (Gbit/s)")
    if left:
        ax.set_ylabel("saturation batch (sequences)")


def _map_legend_and_bar(fig, axes, mesh, span: float, rows: int) -> None:
    """The legend above the panels and the colour bar of the ratio, on the right."""
    handles, labels = axes[0, 0].get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=True))
    fig.legend(unique.values(), unique.keys(), loc="upper center", ncol=3, frameon=False,
               fontsize=8)  # fmt: skip
    # Room above the panels' titles for the legend.
    fig.subplots_adjust(top=1 - 0.8 / (3.3 * rows), right=0.86, hspace=0.3)
    bar = fig.colorbar(mesh, cax=fig.add_axes((0.89, 0.15, 0.015, 0.7)))
    nice = (0.1, 0.25, 0.5, 0.7, 0.8, 0.9, 1, 1.1, 1.25, 1.5, 2, 4, 10)
    ticks = [math.log2(r) for r in nice if abs(math.log2(r)) <= span]
    bar.set_ticks(ticks)
    bar.set_ticklabels([f"{2.0**t:.3g}" for t in ticks])
    bar.set_label("median paired ratio (below 1: AdLoCo faster)")


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
    plt, _ = pyplot()

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
    span = _log_span(grid.cells)
    norm = TwoSlopeNorm(vcenter=0.0, vmin=-span, vmax=span)
    mesh = None
    for row, sharing in enumerate(policies):
        for col, which in enumerate(against):
            ax = axes[row, col]
            z = _panel_values(grid.cells, sharing, which, sats, bws)
            mesh = ax.pcolormesh(x_edges, y_edges, z, cmap="RdBu_r", norm=norm, shading="flat")
            _crossing_lines(ax, found, sharing, which)
            _own_setting(ax, grid.cells, sharing, which)
            _map_axes(ax, sats, sharing, which, row == len(policies) - 1, col == 0)
    _map_legend_and_bar(fig, axes, mesh, span, len(policies))
    return to_png(fig)


def _edges(values: list[float]) -> list[float]:
    """Cell edges on a log axis: geometric midpoints, and as far again beyond each end."""
    if len(values) == 1:
        return [values[0] / 2, values[0] * 2]
    mids = [math.sqrt(a * b) for a, b in zip(values, values[1:], strict=False)]
    return [values[0] ** 2 / mids[0], *mids, values[-1] ** 2 / mids[-1]]


def draw_regimes(regimes: Regimes, main: float | None) -> dict[str, bytes | None]:
    labels = {m.key: m.label for m in regimes.models}
    return {
        "regimes": regimes_figure(regimes.cells, main, labels),
        "regime_map": regime_map_figure(regimes.grid, regimes.crossings),
    }
