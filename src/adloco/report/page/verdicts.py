"""The page's sections on the answer and the verdicts on the paper's claims.

:func:`answer_section`: each claim's verdict in a sentence, the rules it rests
on and where AdLoCo is faster; :func:`claims_section`: every comparison of
every claim (effect, interval, exact test, verdict, why) and each seed's
values. Part of :func:`adloco.report.page.render.render_page`; the headings and
fixed prose are ``templates/answer.html`` and ``templates/claims*.html``.
"""

from __future__ import annotations

import math

from markupsafe import Markup

from adloco.report.analysis.about import seed_words
from adloco.report.analysis.claims import (
    QUANTITY_WORDS,
    Comparison,
    fmt,
    fmt_p,
    fmt_ratio,
)
from adloco.report.analysis.power import DRAWS
from adloco.report.analysis.words import regime_summary
from adloco.report.page.first import headline_curves, verdict_items
from adloco.report.page.parts import (
    Page,
    between_words,
    esc,
    number,
    table,
    verdict,
)
from adloco.report.page.template import render
from adloco.report.page.workers import workers_line


def _effect(c: Comparison) -> tuple[str, str]:
    e = c.effect
    if e is None:
        return "–", "–"
    # A ratio of 0 or ∞ is a censored median: one side never gets there.
    if e.estimate == 0:
        return "→ 0", Markup("{} never gets there").format(c.baseline)
    if math.isinf(e.estimate):
        return "→ ∞", Markup("{} never gets there").format(c.subject)
    est = f"{fmt_ratio(e.estimate)}×"
    i = e.interval
    if i is None:
        return est, "– (unpaired)"
    if i.kind == "none":
        return est, "n/a (1 seed)"
    return est, Markup("[{}, {}]<small>{}</small>").format(
        fmt_ratio(i.low), fmt_ratio(i.high), i.name()
    )


def _what(c: Comparison) -> str:
    if c.quantity == "perplexity_at_time":
        return f"perplexity at {fmt(c.time_s)} s"
    if c.quantity == "final_val_perplexity":
        return "final perplexity"
    return f"{QUANTITY_WORDS[c.quantity]} to {fmt(c.target)}"


def _against(c: Comparison) -> str:
    if c.against == "best baseline":
        return Markup("best baseline<small>{}</small>").format(c.baseline)
    if c.against == "ddp anchor":
        return Markup("ddp anchor<small>{} (shown, not a claim)</small>").format(c.baseline)
    return esc(c.against)


def _seeds(c: Comparison) -> str:
    e = c.effect
    if e is None:
        return "–"
    if e.pairing == "seed":
        return f"{len(e.seeds)} paired"
    return f"{len(c.subject_values)}/{len(c.against_values)}"


def _power(c: Comparison) -> str:
    """The superiority power at the smallest effect, the seeds for the goal, the TOST power."""
    pw = c.power
    if pw is None:
        return "–"
    return Markup("{:.0%}<small>{} seeds for {:.0%}; equivalence {:.0%}</small>").format(
        pw.superiority, pw.needed_words(), pw.goal, pw.equivalence
    )


def comparison_rows(comparisons: list[Comparison]) -> list[list[str]]:
    rows = []
    for c in comparisons:
        est, interval = _effect(c)
        p = fmt_p(c.effect.test.p_less) if c.effect else "–"
        rows.append(
            [f"{c.claim}", _against(c), esc(_what(c)), est, interval, p, _seeds(c), _power(c),
             verdict(c.verdict),
             Markup("<details><summary>why</summary>{}</details>").format(c.reason)]
        )  # fmt: skip
    return rows


COMPARISON_HEADER = [
    "#",
    "AdLoCo against",
    "measured",
    "AdLoCo / other",
    "interval of the median",
    "p (AdLoCo less)",
    "seeds",
    "power",
    "verdict",
    "why",
]


def _per_seed_text(c: Comparison) -> str:
    """Each seed's two values and their ratio, as one line."""
    unit = "_s" if c.quantity == "sim_time_s" else ""
    parts = []
    for s in sorted(set(c.subject_values) | set(c.against_values)):
        a, b = c.subject_values.get(s), c.against_values.get(s)
        parts.append(f"{s}: {number(a, unit)} / {number(b, unit)}")
    return "; ".join(parts)


def seed_counts(p: Page) -> str:
    return seed_words(p.found.seeds)


def answer_section(p: Page) -> str:
    """The verdicts in a sentence each, the headline figure, the regime; the reasons folded."""
    reasons = Markup("").join(
        Markup("<li>{}<br>{}</li>").format(c.statement, c.reason) for c in p.found.claims
    )
    s = p.inputs.settings.section
    warnings = []
    # Each warning's words are plain text, escaped as a whole once filled.
    if p.found.ladder.source == "derived":
        warnings.append(render("warning_derived"))
    if p.found.ladder.main in p.found.ladder.untestable:
        warnings.append(
            render("warning_untestable", why=str(p.found.ladder.untestable[p.found.ladder.main]))
        )
    if p.found.ladder.caveat:
        warnings.append(render("warning_unchecked", caveat=p.found.ladder.caveat))
    warnings += [w for claim in p.found.claims for w in claim.warnings]
    warnings += [sp.warning for sp in p.found.spacing if sp.warning]
    return render(
        "answer",
        warnings=Markup("").join(render("warning", text=esc(w)) for w in warnings),
        verdicts=verdict_items(p),
        curves=headline_curves(p),
        gain=gain_paragraph(p),
        workers=workers_line(p),
        reasons=reasons,
        regimes=esc(regime_summary(p.found, p.inputs.settings)),
        seeds=esc(seed_counts(p)),
        pairing=esc(s.pairing),
        paired_test=esc(s.paired_test),
        test_level=esc(f"{s.test_level:g}"),
        bound=esc(f"{1 + s.smallest_effect:g}"),
        reach="stays at or below it" if s.reached == "stays" else "first gets to it",
        reached=esc(s.reached),
        between=esc(between_words(p.inputs.settings)),
        between_rule=esc(s.between),
        main=fmt(p.found.ladder.main),
        main_note=esc(p.found.ladder.note),
        clock=esc(p.found.clock.get("text", "")),
    )


def gain_paragraph(p: Page) -> str:
    """Each run's share of the ddp anchor's gain: what the low-communication runs trade."""
    g = p.found.gains
    climbed = Markup(", ").join(
        Markup("{} {:.3f}×").format(name, c) for name, c in g.climbs.items()
    )
    climb = render("gain_climb", climbs=climbed) if climbed else ""
    if not g.shares:
        return render("gain_none", note=esc(g.note)) + climb
    parts = Markup(", ").join(
        Markup("{} {:.0%}").format(name, share) for name, share in g.shares.items()
    )
    return render("gain", shares=parts) + climb


def claims_section(p: Page) -> str:
    heads = [c for claim in p.found.claims for c in claim.comparisons if claim.comparisons]
    missing = [
        render(
            "claim_untested", number=str(c.number), verdict=verdict(c.verdict), reason=esc(c.reason)
        )
        for c in p.found.claims
        if not c.comparisons
    ]
    main_rows = [c for c in heads if c.headline or c.target in (p.found.ladder.main, None)]
    rest = [c for c in heads if c not in main_rows]
    per_seed = table(
        ["#", "AdLoCo against", "measured", "seed: AdLoCo / other"],
        [[str(c.claim), _against(c), esc(_what(c)), esc(_per_seed_text(c))] for c in main_rows],
    )
    main = (
        render(
            "claims_main",
            table=table(COMPARISON_HEADER, comparison_rows(main_rows), numeric=(0, 3, 5)),
            per_seed=per_seed,
        )
        if main_rows
        else ""
    )
    others = (
        render(
            "claims_rest",
            count=str(len(rest)),
            table=table(COMPARISON_HEADER, comparison_rows(rest), numeric=(0, 3, 5)),
        )
        if rest
        else ""
    )
    s = p.inputs.settings.section
    return render(
        "claims",
        level=f"{s.test_level:g}",
        bound=f"{1 + s.smallest_effect:g}",
        goal=f"{s.power_goal:.0%}",
        draws=f"{DRAWS:,}",
        missing=Markup("").join(missing),
        main=main,
        rest=others,
    )
