"""The page's regime section: where the wall-clock claim holds, on which device and network.

Part of ``adloco report``'s page (:mod:`adloco.report.page.render` places it): the
sentence of where the claim holds, the clock models, the bandwidth sweep's
tables, the regime map (saturation batch against bandwidth) with its
crossing lines, claim 1 on every brought device and network, and — per
sweep — what it varies and what it cannot recompute. The numbers come from
:mod:`adloco.report.analysis.regime_replay`; the headings and fixed prose are
``templates/regimes.html``, ``regime_map*.html`` and ``devices*.html``.
"""

from __future__ import annotations

from markupsafe import Markup

from adloco.report.analysis.claims import fmt, fmt_ratio
from adloco.report.analysis.regime_replay import SWEEPS
from adloco.report.analysis.regime_sweep import RegimeCell, bandwidth_text
from adloco.report.analysis.words import regime_summary
from adloco.report.page.parts import VERDICT_CSS, Page, curve_text, esc, figure, table, verdict
from adloco.report.page.template import render


def _labels(p: Page) -> dict[str, str]:
    return {m.key: m.label for m in p.found.regimes.models}


def _cell(c: RegimeCell | None) -> str:
    if c is None:
        return "–"
    i = c.effect.interval
    ci = (
        ""
        if i is None or i.kind == "none"
        else Markup("<small>[{}, {}]</small>").format(fmt_ratio(i.low), fmt_ratio(i.high))
    )
    cls = VERDICT_CSS.get(c.verdict, "not-testable") + (" own" if c.own else "")
    # A ratio of 0 or ∞ is a censored median: one run never gets there.
    estimate = c.effect.estimate
    shown = "→ 0" if estimate == 0 else "→ ∞" if estimate == float("inf") else fmt_ratio(estimate)
    return Markup("<span class='{}'>{}</span>{}").format(cls, shown, ci)


def _coloured(table_html: Markup) -> Markup:
    # Highlight classes sit on the span; the cell colour comes from the same class.
    body = str(table_html)
    for cls in VERDICT_CSS.values():
        body = body.replace(
            f"<td class='n'><span class='{cls}", f"<td class='n {cls}'><span class='{cls}"
        )
    return Markup(body)  # the table's own HTML, a class added to some cells


def _regime_table(p: Page, against: str) -> str:
    # Brought networks have a table of their own (claim 1 on brought devices and networks).
    cells = [
        c
        for c in p.found.regimes.cells
        if c.target == p.found.ladder.main and c.against == against and not c.network
    ]
    if not cells:
        return ""
    points = sorted(
        {(c.bandwidth_gbit_s, c.latency_s, c.network) for c in cells},
        key=lambda k: (bool(k[2]), k[0], k[2]),
    )
    keys = list(dict.fromkeys((c.clock, c.sharing) for c in cells))
    labels = _labels(p)
    index = {(c.clock, c.sharing, c.bandwidth_gbit_s, c.latency_s, c.network): c for c in cells}
    rows = [
        [esc(labels[clock]), esc(sharing.replace("_", " "))]
        + [_cell(index.get((clock, sharing, *point))) for point in points]
        for clock, sharing in keys
    ]
    header = ["clock", "slot sharing"] + [
        Markup("{}<small>{}, {:g} s</small>").format(name, bandwidth_text(bw), latency)
        if name
        else esc(bandwidth_text(bw))
        for bw, latency, name in points
    ]
    title = {
        "diloco": "against DiLoCo",
        "best": "against the best baseline of each cell",
        "ddp": "against the ddp anchor",
    }[against]
    return render(
        "regime_table",
        main=fmt(p.found.ladder.main),
        against=title,
        table=_coloured(table(header, rows, numeric=range(2, len(header)))),
    )


MAP_GROUPS = [("concurrent", "diloco"), ("concurrent", "best"),
              ("time_slicing", "diloco"), ("time_slicing", "best")]  # fmt: skip


def _no_crossing(cells: list) -> str:
    """What a saturation batch's cells say when the median ratio never crosses 1."""
    side = {c.verdict for c in cells}
    return (
        "AdLoCo faster at every bandwidth"
        if all(c.effect.estimate < 1 for c in cells)
        else "AdLoCo slower at every bandwidth"
        if all(c.effect.estimate >= 1 for c in cells)
        else "several crossings"
        if len(side) > 1
        else "–"
    )


def _map_row(r, s: int) -> list[str]:
    """One saturation batch of the map's table: the crossing bandwidth of each group."""
    grid = r.grid
    row = [Markup("{} (runs')").format(s) if s == grid.own_saturation else str(s)]
    for sharing, against in MAP_GROUPS:
        found = {
            c.line: c.bandwidth_gbit_s
            for c in r.crossings
            if (c.sharing, c.against, c.saturation_batch) == (sharing, against, s)
        }
        if "median" not in found:
            cells = [
                c for c in grid.cells
                if (c.sharing, c.against, c.saturation_batch) == (sharing, against, s)
            ]  # fmt: skip
            row.append(_no_crossing(cells))
            continue
        band = " – ".join(bandwidth_text(found[k]) for k in ("high", "low") if k in found)
        small = Markup("<small>{}</small>").format(band) if band else ""
        row.append(Markup("{}{}").format(bandwidth_text(found["median"]), small))
    return row


def _map_section(p: Page) -> str:
    r = p.found.regimes
    if r is None or not r.grid.cells:
        note = r.grid.note if r is not None else "no regime sweep"
        return render("regime_map", content=render("no_map", note=esc(note)))
    grid = r.grid
    # Fixed words around a number: markup as written (its apostrophe stays one).
    own = (
        Markup("the runs' own device saturates at {} sequences (the star)").format(
            grid.own_saturation
        )
        if grid.own_saturation
        else Markup("the runs' own curve is not a roofline, so it has no place on this axis")
    )
    rows = [_map_row(r, s) for s in grid.saturations]
    header = ["saturation batch"] + [
        Markup("{}<small>slots {}</small>").format(
            "DiLoCo" if a == "diloco" else "best baseline", s.replace("_", " ")
        )
        for s, a in MAP_GROUPS
    ]
    grid_html = render(
        "regime_map_grid",
        saturations=str(len(grid.saturations)),
        bandwidths=str(len(grid.networks)),
        own=own,
        figure=figure(p.figures.get("regime_map"), "regime_map", "no map"),
        table=table(header, rows, numeric=range(1, len(header))),
    )
    return render("regime_map", content=grid_html)


def _devices_section(p: Page) -> str:
    r = p.found.regimes
    if r is None or not (r.devices or r.networks):
        return render("devices", content=render("devices_none"))
    # Rows: each brought device and the runs' own curve, on each brought network and the
    # cluster's own; the runs' own curve on the cluster's network is the trained setting.
    own_bw, own_latency = p.found.clock.get("bandwidth_gbit_s"), p.found.clock.get("latency_s")

    def shown(c: RegimeCell) -> bool:
        on_own = not c.network and (c.bandwidth_gbit_s, c.latency_s) == (own_bw, own_latency)
        device = c.clock.startswith("device:") or c.clock == "run"
        return c.target == p.found.ladder.main and device and (bool(c.network) or on_own)

    cells = [c for c in p.found.regimes.cells if shown(c)]
    labels = {m.key: m.key.removeprefix("device:") for m in p.found.regimes.models}
    labels["run"] = "the runs' own curve"
    againsts = list(dict.fromkeys(c.against for c in cells if c.against != "ddp"))
    keys = list(dict.fromkeys((c.clock, c.network, c.bandwidth_gbit_s, c.sharing) for c in cells))
    index = {(c.clock, c.network, c.bandwidth_gbit_s, c.sharing, c.against): c for c in cells}
    rows = []
    for clock, network, bw, sharing in keys:
        row = [
            esc(labels[clock]),
            esc(network or bandwidth_text(bw)),
            esc(sharing.replace("_", " ")),
        ]
        for a in againsts:
            c = index.get((clock, network, bw, sharing, a))
            row.append("–" if c is None else _cell(c) + verdict(c.verdict))
        rows.append(row)
    names = {"diloco": "DiLoCo", "best": "best baseline"}
    header = ["device", "network", "slot sharing"] + [
        esc(names.get(a, a.removeprefix("baseline:"))) for a in againsts
    ]
    brought = Markup("").join(
        Markup("<li><b>{}</b>: {}; {}</li>").format(d.name, d.source, curve_text(d.curve))
        for d in r.devices
    ) + Markup("").join(
        Markup("<li><b>{}</b>: {}, latency {:g} s</li>").format(
            n.name, bandwidth_text(n.bandwidth_gbit_s), n.latency_s
        )
        for n in r.networks
    )
    content = render(
        "devices_brought",
        brought=brought,
        table=_coloured(table(header, rows, numeric=range(3, len(header)))),
    )
    return render("devices", content=content)


def _cannot_table() -> str:
    rows = [[esc(name), esc(varies), esc(held)] for name, (varies, held) in SWEEPS.items()]
    header = ["sweep", "varies", Markup("held at the runs' values (cannot be replayed)")]
    return render("sweeps", table=table(header, rows))


def regimes_section(p: Page) -> str:
    models = Markup("").join(
        Markup("<li><b>{}</b>: {}</li>").format(
            m.label,
            m.note or ", ".join(f"{d}: {curve_text(c)}" for d, c in (m.curves or {}).items()),
        )
        for m in p.found.regimes.models
        if not m.key.startswith("device:")
    )
    return render(
        "regimes",
        summary=esc(regime_summary(p.found, p.inputs.settings)),
        models=models,
        figure=figure(p.figures.get("regimes"), "regimes", "no regime cells"),
        against_diloco=_regime_table(p, "diloco"),
        against_best=_regime_table(p, "best"),
        against_ddp=_regime_table(p, "ddp"),
        map=_map_section(p),
        devices=_devices_section(p),
        cannot=_cannot_table(),
    )
