"""Figures of the regime sweeps: ratios against bandwidth, and the map, read back from the axes."""

from __future__ import annotations

import math
from types import SimpleNamespace as NS

import numpy as np
import pytest

from adloco.report.figures.regime_figures import _edges, regime_map_figure, regimes_figure


def cell(estimate, bandwidth, against="diloco", clock="run", sharing="concurrent", own=False,
         interval=None, saturation=None):  # fmt: skip
    return NS(target=100.0, against=against, clock=clock, sharing=sharing,
              bandwidth_gbit_s=bandwidth, own=own, saturation_batch=saturation,
              network="", latency_s=0.001,
              effect=NS(estimate=estimate, interval=interval))  # fmt: skip


def test_edges_are_geometric_midpoints_and_as_far_again_beyond_the_ends():
    assert _edges([1.0, 4.0, 16.0]) == pytest.approx([0.5, 2.0, 8.0, 32.0])
    assert _edges([8.0]) == [4.0, 16.0]


def test_ratios_against_bandwidth_per_clock_and_sharing(drawn):
    cells = [
        cell(0.8, 0.1, interval=NS(low=0.6, high=0.9)),
        cell(1.2, 1.0, interval=NS(low=1.0, high=1.5), own=True),
        cell(0.9, 0.1, sharing="time_slicing"),
        cell(1.1, 1.0, sharing="time_slicing"),
        cell(0.7, 0.1, against="best"),
        cell(0.5, 1.0, against="best"),
        cell(2.0, 1.0, clock="linear"),
        cell(3.0, 1.0, clock="linear"),
    ]
    cells[-1].target = 50.0  # another target: left out
    labels = {"run": "own", "linear": "linear"}
    assert regimes_figure(cells, 100.0, labels) == b"drawn"
    (fig,) = drawn
    diloco_ax, best_ax = fig.axes
    assert [diloco_ax.get_title(), best_ax.get_title()] == [
        "AdLoCo / DiLoCo",
        "AdLoCo / best baseline",
    ]
    lines = {line.get_label(): line for line in diloco_ax.lines}
    assert list(lines["own, concurrent"].get_xdata()) == [0.1, 1.0]
    assert list(lines["own, concurrent"].get_ydata()) == [0.8, 1.2]
    assert lines["own, time_slicing"].get_linestyle() == "--"
    assert list(lines["linear, concurrent"].get_ydata()) == [2.0]
    assert list(best_ax.lines[0].get_ydata()) == [0.7, 0.5]
    # The band of the interval, and the star at the runs' own setting.
    (band,) = [c for c in diloco_ax.collections if c.get_label() != "the runs' own setting"]
    ys = band.get_paths()[0].vertices[:, 1]
    assert (ys.min(), ys.max()) == pytest.approx((0.6, 1.5))
    (star,) = [c for c in diloco_ax.collections if c.get_label() == "the runs' own setting"]
    assert star.get_offsets().tolist() == [[1.0, 1.2]]
    assert diloco_ax.get_xscale() == "log" and diloco_ax.get_yscale() == "log"
    assert regimes_figure(cells, 75.0, labels) is None


def test_the_map_colours_log2_of_the_median_ratio(drawn):
    grid_cells = [
        cell(0.5, 0.1, saturation=1),
        cell(2.0, 1.0, saturation=1),
        cell(1.0, 0.1, saturation=4, own=True),
        cell(math.inf, 1.0, saturation=4),  # never reached: no colour
        cell(0.25, 0.1, against="best", saturation=1),
    ]
    found = [NS(sharing="concurrent", against="diloco", line="median", saturation_batch=1,
                bandwidth_gbit_s=0.3)]  # fmt: skip
    grid = NS(cells=grid_cells, saturations=(1, 4))
    assert regime_map_figure(grid, found) == b"drawn"
    (fig,) = drawn
    diloco_ax, best_ax, bar = fig.axes
    (mesh,) = diloco_ax.collections[:1]
    values = np.ma.filled(mesh.get_array(), np.nan).reshape(2, 2)
    assert values[0].tolist() == [-1.0, 1.0]  # saturation 1: log2 0.5, log2 2
    assert values[1][0] == 0.0 and math.isnan(values[1][1])
    # The colour scale is symmetric about 0, as wide as the largest |log2 ratio| (best: 2).
    assert (mesh.norm.vmin, mesh.norm.vmax) == (-2.0, 2.0)
    (crossing,) = [line for line in diloco_ax.lines if line.get_label() == "ratio = 1"]
    assert crossing.get_xydata().tolist() == [[0.3, 1.0]]
    (star,) = diloco_ax.collections[1:]
    assert star.get_offsets().tolist() == [[0.1, 4.0]]
    assert list(diloco_ax.get_yticks()) == [1, 4]
    assert "best baseline" in best_ax.get_title() and "concurrent" in best_ax.get_title()
    assert bar.get_ylabel() == "median paired ratio (below 1: AdLoCo faster)"
    assert regime_map_figure(NS(cells=[], saturations=()), []) is None


def test_the_regime_figure_leaves_out_ratios_no_log_axis_holds():
    # A baseline that never reaches the target gives a ratio of 0, an AdLoCo
    # that never does one of infinity; a figure of only those has nothing to draw.
    from types import SimpleNamespace as NS

    from adloco.report.figures.regime_figures import regimes_figure

    def cell(estimate, bandwidth):
        return NS(target=100.0, against="diloco", clock="run", sharing="concurrent",
                  bandwidth_gbit_s=bandwidth, own=False, network="",
                  effect=NS(estimate=estimate, interval=None))  # fmt: skip

    labels = {"run": "the runs' own curve"}
    assert regimes_figure([cell(math.inf, 0.1), cell(0.0, 1.0)], 100.0, labels) is None
    png = regimes_figure([cell(math.inf, 0.1), cell(0.9, 1.0), cell(1.1, 10.0)], 100.0, labels)
    assert png.startswith(b"\x89PNG")


def test_named_networks_are_points_apart_from_the_bandwidth_sweep(drawn):
    # The sweep at the cluster's latency, and two brought networks with their own latency:
    # one at a swept bandwidth (100 Gbit/s), one between (10 Gbit/s would be swept too).
    sweep = [cell(r, bw) for r, bw in ((0.8, 0.1), (1.1, 1.0), (1.2, 10.0), (1.2, 100.0))]
    named = [cell(1.6, 100.0), cell(1.4, 10.0), cell(1.5, 100.0, sharing="time_slicing")]
    for c, (name, latency) in zip(named, [("ib", 5e-06), ("eth", 5e-05), ("ib", 5e-06)],
                                  strict=True):  # fmt: skip
        c.network, c.latency_s = name, latency
    assert regimes_figure(sweep + named, 100.0, {"run": "own"}) == b"drawn"
    (fig,) = drawn
    (ax,) = fig.axes
    (line,) = ax.lines[:1]
    # The line holds the sweep alone: one point per bandwidth, no jump at 10 or 100 Gbit/s.
    assert list(line.get_xdata()) == [0.1, 1.0, 10.0, 100.0]
    assert list(line.get_ydata()) == [0.8, 1.1, 1.2, 1.2]
    points = {tuple(map(float, off)): col for col in ax.collections for off in col.get_offsets()}
    assert set(points) == {(100.0, 1.6), (10.0, 1.4), (100.0, 1.5)}
    # Filled for slots concurrent, open for time slicing.
    assert points[(100.0, 1.6)].get_facecolor()[0][3] == 1.0
    assert len(points[(100.0, 1.5)].get_facecolor()) == 0 or (
        points[(100.0, 1.5)].get_facecolor()[0][3] == 0.0
    )
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "ib (100 Gbit/s, 5e-06 s)" in labels and "eth (10 Gbit/s, 5e-05 s)" in labels
