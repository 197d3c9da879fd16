"""The first screen's figure: the y-range rule by hand, the drawn medians, the clipped anchor."""

from __future__ import annotations

import pytest

from adloco.report.figures.headline_figure import PADDING, headline_figure, y_range


def band(low: list[float], high: list[float]) -> tuple[list, list, list, list]:
    mid = [(a + b) / 2 for a, b in zip(low, high, strict=True)]
    return list(range(len(low))), mid, low, high


def test_the_y_range_spans_every_run_but_the_anchor_and_the_base():
    bands = {"adloco": band([150, 140], [152, 142]), "diloco": band([151, 138], [155, 139]),
             "ddp": band([150, 100], [151, 101])}  # fmt: skip
    # Without ddp: 138 .. 155; with the base at 156: 138 .. 156, padded by 6 % of 18.
    low, high = y_range(bands, "ddp", 156.0)
    assert (low, high) == pytest.approx((138 - PADDING * 18, 156 + PADDING * 18))
    low, high = y_range(bands, "ddp", None)
    assert (low, high) == pytest.approx((138 - PADDING * 17, 155 + PADDING * 17))
    assert y_range({"ddp": bands["ddp"]}, "ddp", 156.0) is None  # only the anchor: its own range
    low, high = y_range({"a": band([10, 10], [10, 10])}, None, None)  # one flat value
    assert (low, high) == pytest.approx((9.5, 10.5))


def test_the_medians_are_drawn_and_the_anchor_is_named_where_it_leaves(workspace, drawn):
    ws = workspace
    ws.run("diloco", {"method": "diloco"},
           {0: ws.single([95, 90, 85]), 1: ws.single([97, 92, 87])})  # fmt: skip
    ws.run("ddp", {"method": "ddp"}, {0: ws.single([90, 60, 40]), 1: ws.single([90, 60, 40])})
    runs, *_ = ws.load([60])
    png = headline_figure(
        runs, ["diloco", "ddp"], "ddp", 88.0, {"base model": 100.0, "unigram": 300.0}
    )
    assert png == b"drawn"
    (fig,) = drawn
    (ax,) = fig.axes
    lines = {line.get_label(): line for line in ax.lines}
    assert list(lines["diloco"].get_xdata()) == [1, 2, 3]  # 1 simulated second a round
    assert list(lines["diloco"].get_ydata()) == pytest.approx([96, 91, 86])
    # The range: diloco's band 85 .. 97 and the base 100, padded by 6 % of 15.
    assert ax.get_ylim() == pytest.approx((85 - PADDING * 15, 100 + PADDING * 15))
    flat = {round(line.get_ydata()[0], 6) for line in ax.lines if len(set(line.get_ydata())) == 1}
    assert flat == {88.0, 100.0}  # the main target and the base; the unigram level is not drawn
    (label,) = [t for t in ax.texts if "ddp" in t.get_text()]
    assert label.get_text() == "ddp ↓ ends at 40.0"
    assert label.xy == pytest.approx((2, 85 - PADDING * 15))  # its first median below the axis


def test_no_curve_no_figure(workspace):
    ws = workspace
    ws.run("diloco", {"method": "diloco"}, {0: ws.single([None, None])})
    runs, *_ = ws.load([60])
    assert headline_figure(runs, ["diloco"], None, None, {}) is None
