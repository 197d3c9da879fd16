"""Page section and first-screen line of the workers × local batch map.

What :mod:`adloco.report.analysis.workers_map` computes, shown: where the DiLoCo
family keeps ddp's gain as the global batch is split over more workers, the
base's noise scale B_simple, and the local batches AdLoCo trains with. The
heading and fixed prose are ``templates/workers.html`` and ``workers_map.html``.
"""

from __future__ import annotations

from markupsafe import Markup

from adloco.report.analysis.claims import fmt
from adloco.report.page.parts import Page, esc, figure, number, table
from adloco.report.page.template import render


def workers_line(p: Page) -> str:
    """One line for the first screen; empty when there is no map."""
    w = p.found.workers
    if len(w.points) < 2:
        return ""
    splits = ", ".join(
        f"{pt.workers} × {pt.local_batch}: {pt.share:.0%}"
        for pt in w.points
        if pt.share is not None
    )
    b_simple = render("workers_b_simple", b_simple=f"{w.b_simple:.0f}") if w.b_simple else ""
    adloco = ""
    if w.adloco_batches:
        low, high = min(w.adloco_batches), max(w.adloco_batches)
        adloco = render("workers_adloco", low=f"{low:g}", high=f"{high:g}")
    # The words are plain text, escaped as a whole once filled.
    words = render(
        "workers_words",
        global_batch=str(w.global_batch),
        splits=splits,
        b_simple=b_simple,
        adloco=adloco,
    )
    return render("workers_line", words=esc(words))


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
    w = p.found.workers
    if len(w.points) < 2:
        return render("workers", content=render("no_map", note=esc(w.note)))
    header = ["run", "workers", "local batch", "final perplexity", Markup("share of ddp's gain"),
              "climb", "seeds"]  # fmt: skip
    content = render(
        "workers_map",
        global_batch=str(w.global_batch),
        lr=f" ({w.effective_lr:g})" if w.effective_lr is not None else "",
        table=table(header, _rows(w), numeric=(1, 2, 3, 4, 5, 6)),
        figure=figure(p.figures.get("workers_map"), "workers_map", "fewer than two splits"),
    )
    return render("workers", content=content)
