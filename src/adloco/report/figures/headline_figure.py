"""The first screen's figure: the headline runs' perplexity against simulated time.

One panel: for each headline run (AdLoCo, DiLoCo, the best baseline, the ddp
anchor) the median validation perplexity over seeds with its min–max band
(:func:`adloco.report.figures.run_figures.seed_band`), the main target and the base
model as horizontal lines. The y-range is chosen for the low-communication
runs, so that their differences show (:func:`y_range`); the anchor, which ends
far below them, is drawn until it leaves the axis and labelled there with its
final median. Returns PNG bytes, or None when no headline run has a curve.
"""

from __future__ import annotations

from adloco.report.figures.drawing import (
    WIDTH_IN,
    legend_on_top,
    level_lines,
    palette,
    pyplot,
    to_png,
)
from adloco.report.figures.run_figures import seed_band, seed_curves
from adloco.report.inputs.results import RunSeed

# Room above and below the low-communication runs' bands, as a share of their span.
PADDING = 0.06


def y_range(
    bands: dict[str, tuple[list, list, list, list]], anchor: str | None, base: float | None
) -> tuple[float, float] | None:
    """The y-limits that show every headline run but the anchor whole.

    From the lowest band value to the highest band value (or the base model's
    perplexity, when higher) of the runs other than ``anchor``, padded by
    :data:`PADDING` of that span on both sides. None when only the anchor has
    a band (it then sets the range itself).
    """
    values = [
        y for name, (_, _, low, high) in bands.items() if name != anchor for y in (*low, *high)
    ]
    if not values:
        return None
    low, high = min(values), max(values + ([base] if base is not None else []))
    pad = PADDING * (high - low) if high > low else 0.05 * high
    return low - pad, high + pad


def headline_figure(
    runs: list[RunSeed],
    names: list[str],
    anchor: str | None,
    main_target: float | None,
    levels: dict[str, float],
) -> bytes | None:
    """Validation perplexity against simulated time for ``names``; ``anchor`` may be clipped.

    ``levels``: the base model's perplexity (key ``base model``) is drawn;
    the reference levels, far above a continued model, are not.
    """
    bands = {n: b for n in names if (b := seed_band(seed_curves(runs, n, "sim_time_s")))}
    if not bands:
        return None
    plt, _ = pyplot()
    colors = palette(runs)
    fig, ax = plt.subplots(figsize=(WIDTH_IN, 3.6))
    for name, (x, mid, low, high) in bands.items():
        ax.plot(x, mid, color=colors[name], label=name, linewidth=1.6)
        if low != high:
            ax.fill_between(x, low, high, color=colors[name], alpha=0.15, linewidth=0)
    if main_target is not None:
        ax.axhline(main_target, color="black", linestyle=":", linewidth=1)
        ax.annotate("main target", (1.0, main_target), xycoords=("axes fraction", "data"),
                    fontsize=7, ha="right", va="bottom")  # fmt: skip
    base = levels.get("base model")
    limits = y_range(bands, anchor, base)
    if base is not None:
        level_lines(ax, {"base model": base})
    if limits is not None:
        ax.set_ylim(*limits)
        _label_clipped(ax, bands, limits[0], colors)
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("validation perplexity")
    legend_on_top(fig, ax, row_height=0.1)
    return to_png(fig)


def _label_clipped(ax, bands: dict, floor: float, colors: dict) -> None:
    """Each run whose median leaves the axis below: its name and final median where it leaves."""
    for name, (x, mid, _, _) in bands.items():
        below = [i for i, y in enumerate(mid) if y < floor]
        if not below:
            continue
        i = below[0]
        ax.annotate(
            f"{name} ↓ ends at {mid[-1]:.1f}",
            (x[i], floor),
            xytext=(4, 4),
            textcoords="offset points",
            fontsize=8,
            color=colors[name],
            ha="left",
            va="bottom",
        )
