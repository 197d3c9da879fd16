"""Page section and first-screen line of the workers × local batch map.

What :mod:`adloco.report.workers_map` computes, shown: where the DiLoCo
family keeps ddp's gain as the global batch is split over more workers, the
base's noise scale B_simple, and the local batches AdLoCo trains with. The
heading and fixed prose are ``templates/workers.html`` and ``workers_map.html``.
"""

from __future__ import annotations

from adloco.report.claims import fmt
from adloco.report.page import Page, esc, figure, number, table
from adloco.report.template import render


def workers_line(p: Page) -> str:
    """One line for the first screen; empty when there is no map."""
    w = p.workers
    if len(w.points) < 2:
        return ""
    splits = ", ".join(
        f"{pt.workers} × {pt.local_batch}: {pt.share:.0%}"
        for pt in w.points
        if pt.share is not None
    )
    words = (
        f"DiLoCo's share of ddp's gain as ddp's global batch of {w.global_batch} is split over "
        f"more workers (workers × local batch): {splits}"
    )
    if w.b_simple:
        words += f"; the base's noise scale B_simple is {w.b_simple:.0f} sequences"
    if w.adloco_batches:
        low, high = min(w.adloco_batches), max(w.adloco_batches)
        words += f"; AdLoCo's local batch runs {low:g} – {high:g}"
    return f"<p>{esc(words)} (<a href='#workers'>map</a>).</p>"


def _rows(w) -> list[list[str]]:
    """One row per split, then AdLoCo's."""
    rows = [
        [
            esc(pt.run),
            str(pt.workers),
            str(pt.local_batch),
            fmt(pt.final) if pt.final is not None else "–",
            f"{pt.share:.0%}" if pt.share is not None else "–",
            f"{pt.climb:.3f}×" if pt.climb is not None else "–",
            str(pt.seeds),
        ]
        for pt in w.points
    ]
    if w.adloco_batches:
        low, high = min(w.adloco_batches), max(w.adloco_batches)
        rows.append(
            [
                esc(w.adloco or ""),
                "varies",
                f"{number(low)} – {number(high)}",
                fmt(w.adloco_final) if w.adloco_final is not None else "–",
                f"{w.adloco_share:.0%}" if w.adloco_share is not None else "–",
                "",
                "",
            ]
        )
    return rows


def workers_section(p: Page) -> str:
    w = p.workers
    if len(w.points) < 2:
        return render("workers", content=f"<p class='note'>No map: {esc(w.note)}.</p>")
    header = ["run", "workers", "local batch", "final perplexity", "share of ddp's gain",
              "climb", "seeds"]  # fmt: skip
    content = render(
        "workers_map",
        global_batch=str(w.global_batch),
        table=table(header, _rows(w), numeric=(1, 2, 3, 4, 5, 6)),
        figure=figure(
            p.figures.get("workers_map"),
            "final perplexity by local batch",
            "Lower is better: follow DiLoCo's line from many small workers (left) to one "
            "worker with the whole batch (right), and see where AdLoCo's band of local "
            "batches sits against it and against B_simple (dashed).",
            "fewer than two splits",
        ),
    )
    return render("workers", content=content)
