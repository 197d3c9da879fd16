"""Drawing the report's figures: the backend, PNG bytes, the figures folder, shared styles.

Every figure of the report (:mod:`adloco.report.figures.run_figures`,
:mod:`~adloco.report.figures.regime_figures`, :mod:`~adloco.report.figures.noise_figures`)
is drawn with seaborn on the Agg backend and returned as PNG bytes, or None
when the data for it are absent, so the page can say so instead of failing.
Figures are 11 inches wide at 110 dpi (1210 px), so they fit the page
without scaling up. Here: the backend and theme (:func:`pyplot`), the PNG
bytes without a date (:func:`to_png`), :func:`write_figures`, the axis
formatters, the lines of the reference perplexities (:func:`level_lines`),
one colour per run (:func:`palette`) and the legend above the panels.
"""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any

import matplotlib
import matplotlib.pyplot as plt
import seaborn as sns
from matplotlib.ticker import FuncFormatter

from adloco.core.io import atomic_path
from adloco.report.inputs.results import RunSeed

WIDTH_IN = 11.0
DPI = 110


def pyplot():
    matplotlib.use("Agg")
    sns.set_theme(style="whitegrid", context="notebook", font_scale=0.9)
    return plt, sns


def to_png(fig) -> bytes:
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


def not_drawn_png(name: str) -> bytes:
    """A figure's file when the report had no data for it: one line saying so.

    dvc.yaml names each figure's file as an output of the report stage (never
    the folder, which DVC would empty of a user's files before the stage runs),
    so every name is written; the page shows why the figure is absent.
    """
    plt_, _ = pyplot()
    fig = plt_.figure(figsize=(WIDTH_IN, 0.6))
    fig.text(0.01, 0.5, f"{name}: not drawn, no data for it (index.html says why)", va="center")
    return to_png(fig)


def plain_numbers():
    return FuncFormatter(lambda value, _: f"{value:g}")


def sparse_minor_numbers():
    """Labels of a log axis's minor ticks at 2 and 5 times a power of ten only (no crowding)."""

    def label(value, _):
        if value <= 0:
            return ""
        leading = round(value / 10 ** math.floor(math.log10(value)), 6)
        return f"{value:g}" if leading in (2.0, 5.0) else ""

    return FuncFormatter(label)


def binary_units():
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


def run_names(runs: list[RunSeed]) -> list[str]:
    return list(dict.fromkeys(r.run for r in runs))


def palette(runs: list[RunSeed]) -> dict[str, Any]:
    """One colour per run, the same in every figure."""
    _, sns = pyplot()
    names = run_names(runs)
    return dict(zip(names, sns.color_palette("tab10", max(len(names), 1)), strict=False))


def legend_on_top(fig, ax, row_height: float) -> None:
    """``ax``'s legend above the panels, five entries a row; none when nothing was drawn."""
    handles, labels = ax.get_legend_handles_labels()
    if labels:
        fig.legend(handles, labels, loc="upper center", ncol=min(len(labels), 5), frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 1 - row_height * math.ceil(len(labels) / 5)))
