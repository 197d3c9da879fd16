"""Figures of the gradient noise, read back from the axes: B_simple along a run, the variances."""

from __future__ import annotations

from pathlib import Path

import pytest

from adloco.report.figures.noise_figures import noise_figure, variance_figure
from adloco.report.inputs.results import Variance


def row(round_, noise, determined=True, asked=None, smoothed=None, ppl=None, run="adloco"):
    return {"run": run, "round": round_, "noise_scale": noise, "determined": determined,
            "requested_global": asked, "smoothed_noise_scale": smoothed,
            "val_perplexity": ppl}  # fmt: skip


def test_noise_scale_by_round_and_against_perplexity(drawn):
    rows = [
        row(1, 10.0, asked=8, ppl=90.0),
        row(1, 30.0, asked=16, ppl=95.0),
        row(2, 40.0, asked=32, smoothed=35.0, ppl=80.0),
        row(3, None, determined=False, asked=32),
        row(1, 999.0, run="other"),
    ]
    assert noise_figure(rows, "adloco") == b"drawn"
    (fig,) = drawn
    by_round, by_ppl = fig.axes
    lines = {line.get_label(): line for line in by_round.lines}
    # Medians per round of the determined estimates: (10 + 30) / 2, 40; round 3 has none.
    assert list(lines["B_simple, median"].get_xdata()) == [1, 2]
    assert list(lines["B_simple, median"].get_ydata()) == [20.0, 40.0]
    asked = lines["batch the test asked for, median"]
    assert list(asked.get_xdata()) == [1, 2, 3] and list(asked.get_ydata()) == [12.0, 32.0, 32.0]
    scatters = {c.get_label(): c for c in by_round.collections}
    assert scatters["B_simple (each seed, trainer)"].get_offsets().tolist() == [
        [1, 10], [1, 30], [2, 40],
    ]  # fmt: skip
    assert scatters["smoothed estimate"].get_offsets().tolist() == [[2, 35]]
    assert scatters["undetermined (‖∇F‖² ≤ 0): 1"].get_offsets().tolist() == [[3, 0.02]]
    (points,) = by_ppl.collections
    assert points.get_offsets().tolist() == [[90, 10], [95, 30], [80, 40]]
    assert by_ppl.xaxis_inverted() and by_ppl.get_yscale() == "log"
    assert fig.get_suptitle() == "adloco: noise scale along the run"
    assert noise_figure(rows, "nobody") is None


def test_variance_histograms_leave_out_index_and_constant_columns(drawn):
    per_batch = [
        {"batch": i, "batch_size": 8, "deviation": float(i % 3), "sqnorm": 1.0 + i}
        for i in range(12)
    ]
    variance = Variance(Path("."), {}, per_batch, None)
    assert variance_figure(variance) == b"drawn"
    (fig,) = drawn
    assert [ax.get_xlabel() for ax in fig.axes] == ["deviation", "sqnorm"]
    # Every batch counted once: the bars of each histogram add up to 12.
    for ax in fig.axes:
        assert sum(p.get_height() for p in ax.patches) == pytest.approx(12)
    assert variance_figure(Variance(Path("."), {}, None, None)) is None
    constant = [{"batch": i, "batch_size": 8} for i in range(4)]
    assert variance_figure(Variance(Path("."), {}, constant, None)) is None
