"""The workers map's figure: final perplexity against the local batch, one point per split.

Drawn from :class:`adloco.report.analysis.workers_map.WorkersMap`: DiLoCo's
splits of ddp's global batch, the base's B_simple and the local batches the
AdLoCo run trains with, on one axis.
"""

from __future__ import annotations

from statistics import median

from adloco.report.analysis.workers_map import WorkersMap
from adloco.report.figures.drawing import WIDTH_IN, plain_numbers, pyplot, to_png


def workers_map_figure(found: WorkersMap) -> bytes | None:
    """Final perplexity against the local batch, one point per split; B_simple and AdLoCo."""
    if len(found.points) < 2:
        return None
    plt, sns = pyplot()
    fig, ax = plt.subplots(figsize=(WIDTH_IN, 4.2))
    xs = [p.local_batch for p in found.points]
    ys = [p.final for p in found.points]
    ax.plot(xs, ys, marker="o", color=sns.color_palette()[0], label="diloco: workers × local batch")
    for p in found.points:
        if p.final is None:
            continue
        words = f"{p.workers} × {p.local_batch}"
        if p.share is not None:
            words += f"\n{p.share:.0%} of ddp's gain"
        ax.annotate(words, (p.local_batch, p.final), textcoords="offset points",
                    xytext=(8, -20), ha="left", fontsize=8)  # fmt: skip
    if found.b_simple:
        ax.axvline(found.b_simple, color="0.4", linestyle="--", linewidth=1)
        ax.annotate(f"base B_simple {found.b_simple:.0f}", (found.b_simple, 0.02),
                    xycoords=("data", "axes fraction"), rotation=90, fontsize=8,
                    ha="right", va="bottom", color="0.3")  # fmt: skip
    if found.adloco_batches and found.adloco_final is not None:
        low, high = min(found.adloco_batches), max(found.adloco_batches)
        mid = median(found.adloco_batches)
        colour = sns.color_palette()[3]
        ax.plot([low, high], [found.adloco_final] * 2, color=colour, linewidth=3, alpha=0.5,
                label=f"{found.adloco}: its local batches over its rounds (min – max, "
                "● median), at its final perplexity")  # fmt: skip
        ax.plot([mid], [found.adloco_final], marker="o", color=colour)
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(plain_numbers())
    right = max([*xs, found.b_simple or 0, *found.adloco_batches])
    ax.set_xlim(min(xs) / 1.5, right * 1.5)
    ax.set_xlabel(f"local batch (sequences per worker step); global batch {found.global_batch}")
    ax.set_ylabel("final validation perplexity\n(median over seeds)")
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    return to_png(fig)
