"""The figures' common parts: PNG bytes, the figures folder, axis labels, reference lines."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pytest

from adloco.report.figures.drawing import (
    DPI,
    binary_units,
    legend_on_top,
    level_lines,
    palette,
    plain_numbers,
    pyplot,
    run_names,
    to_png,
    write_figures,
)


def _figure():
    plt_, _ = pyplot()
    fig, ax = plt_.subplots(figsize=(2, 1))
    ax.plot([1, 2, 3], [3, 1, 2])
    return fig, ax


def test_png_bytes_are_the_same_for_the_same_figure_and_carry_no_date():
    first, second = to_png(_figure()[0]), to_png(_figure()[0])
    assert first.startswith(b"\x89PNG") and first == second
    assert b"Software" not in first and b"matplotlib" not in first
    # 2 x 1 inches at DPI dots per inch: the IHDR chunk holds width and height.
    width, height = int.from_bytes(first[16:20], "big"), int.from_bytes(first[20:24], "big")
    assert (width, height) == (2 * DPI, DPI)


def test_write_figures_writes_drawn_ones_and_removes_undrawn(tmp_path):
    folder = tmp_path / "figures"
    write_figures(folder, {"a": b"one", "b": b"two"})
    assert (folder / "a.png").read_bytes() == b"one" and (folder / "b.png").read_bytes() == b"two"
    write_figures(folder, {"a": None, "b": b"three"})
    assert not (folder / "a.png").exists() and (folder / "b.png").read_bytes() == b"three"
    empty = tmp_path / "empty"
    write_figures(empty, {"a": None})
    assert empty.is_dir() and list(empty.iterdir()) == []


def test_axis_labels():
    assert [plain_numbers()(v, None) for v in (0.5, 2.0, 1500.0)] == ["0.5", "2", "1500"]
    label = binary_units()
    assert [label(v, None) for v in (512, 2048, 3 * 2**20, 1.5 * 2**30)] == [
        "512 B",
        "2 KiB",
        "3 MiB",
        "1.5 GiB",
    ]


def test_level_lines_draw_levels_in_range_and_name_those_far_above():
    fig, ax = _figure()
    ax.set_ylim(0, 10)
    level_lines(ax, {"unigram": 8.0, "base model": 12.0, "uniform": 1000.0})
    drawn = {round(line.get_ydata()[0], 6) for line in ax.lines[1:]}
    assert drawn == {8.0, 12.0}  # 1000 > 1.5 x the top: named, not drawn
    assert ax.get_ylim()[1] == pytest.approx(12.0 * 1.05)  # room for the base model's line
    texts = [t.get_text() for t in ax.texts]
    assert "above: uniform 1000" in texts and "unigram" in texts and "base model" in texts
    plt.close(fig)


def test_level_lines_vertical():
    fig, ax = _figure()
    ax.set_xlim(0, 10)
    level_lines(ax, {"bigram": 4.0}, vertical=True)
    assert list(ax.lines[-1].get_xdata()) == [4.0, 4.0]
    plt.close(fig)


def test_one_colour_per_run_in_configuration_order():
    from types import SimpleNamespace as NS

    runs = [NS(run="b"), NS(run="a"), NS(run="b")]
    assert run_names(runs) == ["b", "a"]
    colours = palette(runs)
    assert list(colours) == ["b", "a"] and colours["a"] != colours["b"]


def test_legend_on_top_only_when_something_is_labelled():
    fig, ax = _figure()
    legend_on_top(fig, ax, row_height=0.05)
    assert fig.legends == []
    ax.plot([1, 2], [1, 2], label="x")
    legend_on_top(fig, ax, row_height=0.05)
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["x"]
    plt.close(fig)


def test_a_log_axis_labels_its_minor_ticks_at_2_and_5_only():
    from adloco.report.figures.drawing import sparse_minor_numbers

    label = sparse_minor_numbers()
    ticks = [0.08, 0.2, 0.3, 0.5, 0.9, 2.0, 3.0, 5.0, 20.0, 0.0]
    assert [label(t, None) for t in ticks] == ["", "0.2", "", "0.5", "", "2", "", "5", "20", ""]
