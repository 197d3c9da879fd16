"""Page sections showing what the verdicts rest on: seeds, rules, targets, B_simple, tuning.

Part of ``adloco report``'s page (:mod:`adloco.report.page.render` places them):

- *Each seed of the headline runs*: the per-seed values the paired tests use;
- *Rules*: each headline verdict under the configured rules and with each
  rule switched to its alternative (:mod:`adloco.report.analysis.sensitivity`);
- *Targets, references and the base model*: every target beside the
  validation split's uniform, unigram and bigram perplexities and the base
  model, with the unigram rule's verdict;
- *Noise scale along the run*: B_simple from the AdLoCo runs' statistics;
- *Tuning*: the inner-learning-rate grid of each method and the chosen value.

Their headings and fixed prose are templates (``templates/seeds*.html``,
``rules*.html``, ``targets.html``, ``noise.html``, ``tuning*.html``).
"""

from __future__ import annotations

import math
from typing import Any

from markupsafe import Markup

from adloco.report.analysis.claims import QUANTITY_WORDS, Comparison, fmt, fmt_ratio
from adloco.report.analysis.tuning import MECHANISM, TUNED
from adloco.report.inputs.references import REFERENCE_LEVELS
from adloco.report.page.parts import (
    Page,
    between_words,
    esc,
    figure,
    levels_note,
    number,
    table,
    verdict,
)
from adloco.report.page.template import render
from adloco.report.settings import RULES

HEADLINE_TITLES = {
    "sim_time_s": "Simulated time to the main target",
    "communications": "Communications to the main target",
    "perplexity_at_time": "Perplexity at the equal simulated time",
}


def _value(value: float | None, quantity: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if math.isinf(value):
        return "never" if quantity != "perplexity_at_time" else "–"
    return number(value, "_s" if quantity == "sim_time_s" else "")


def headline_section(p: Page) -> str:
    h = p.found.headline
    if h is None:
        return render("seeds", content=render("seeds_none"))
    adloco = h.runs[0]
    others = h.runs[1:]
    header = (
        ["seed"]
        + [Markup("{}<small>{}</small>").format(n, p.found.roles.role_of(n)) for n in h.runs]
        + [f"{adloco} / {n}" for n in others]
    )
    parts = []
    for q, by_run in h.values.items():
        rows = []
        for s in h.seeds:
            row = [str(s)]
            row += [_value(by_run[n].get(s), q) for n in h.runs]
            for n in others:
                a, b = by_run[adloco].get(s), by_run[n].get(s)
                if a is None or b is None or math.isnan(a) or math.isnan(b):
                    row.append("–")
                elif math.isinf(a) and math.isinf(b):
                    row.append("tie (neither)")
                else:
                    row.append(fmt_ratio(a / b if not math.isinf(b) else 0.0))
            rows.append(row)
        when = (
            render(
                "seeds_at_time",
                time=fmt(h.time_s),
                equal_time=esc(p.inputs.settings.section.equal_time),
            )
            if q == "perplexity_at_time"
            else render("seeds_at_target", main=fmt(p.found.ladder.main))
        )
        title = f"{HEADLINE_TITLES[q]} {when}"
        parts.append(
            render(
                "quantity", title=title, table=table(header, rows, numeric=range(1, len(header)))
            )
            + (levels_note(p) if q == "perplexity_at_time" else "")
        )
    values = render(
        "seeds_values",
        reached=esc(p.inputs.settings.section.reached),
        between=between_words(p.inputs.settings),
        between_rule=esc(p.inputs.settings.section.between),
        which="first" if p.inputs.settings.section.equal_time == "fastest" else "last",
        tables=Markup("").join(parts),
    )
    return render("seeds", content=values)


HEADLINE_OTHERS = ("best baseline", "ddp anchor")  # beside DiLoCo, the other headline runs


def _rule_comparisons(p: Page) -> list[Comparison]:
    """The headline comparisons (AdLoCo against each headline run at the main target: DiLoCo,
    the best baseline, the ddp anchor; each ablation) and the equal-time one against DiLoCo."""
    out = []
    for claim in p.found.claims:
        for c in claim.comparisons:
            against_headline = (
                c.claim in (1, 2)
                and c.target == p.found.ladder.main
                and c.against in HEADLINE_OTHERS
            )
            equal_time = c.quantity == "perplexity_at_time" and c.against == p.found.roles.diloco
            if c.headline or against_headline or equal_time:
                out.append(c)
    return out


def _rule_label(c: Comparison) -> str:
    against = f"{c.against} ({c.baseline})" if c.against in HEADLINE_OTHERS else c.against
    return f"{QUANTITY_WORDS[c.quantity]} against {against}" + (
        f" at {fmt(c.target)}" if c.target else ""
    )


def rules_section(p: Page) -> str:
    comparisons = _rule_comparisons(p)
    if not comparisons:
        return render("rules", content=render("rules_none"))
    s = p.inputs.settings.section
    header = ["#", "comparison", "as configured"] + [
        Markup("{}: {}<small>instead of {}</small>").format(rule, alt, getattr(s, rule))
        for rule, alt in ((r, c) for r, c in _alternatives(p))
    ]
    rows = []
    for c in comparisons:
        row = [str(c.claim), esc(_rule_label(c)), verdict(c.verdict)]
        for rule, _ in _alternatives(p):
            alt = c.alternatives.get(rule)
            cell = verdict(alt["verdict"]) if alt else "–"
            if alt and alt["verdict"] != c.verdict:
                cell += Markup("<small>changes</small>")
            row.append(cell)
        rows.append(row)
    content = render("rules_table", table=table(header, rows, numeric=(0,)))
    return render("rules", content=content + spacing_note(p))


SPACING_HEADER = [
    "run",
    "model changes",
    "evaluations",
    Markup("largest gap<small>tokens</small>"),
    Markup("largest gap<small>share of its tokens</small>"),
    "the crossing",
]


def spacing_note(p: Page) -> str:
    """Each headline run's evaluation spacing and what it makes of the crossing (none: "")."""
    if not p.found.spacing:
        return ""
    rows = []
    for sp in p.found.spacing:
        w = sp.widest
        changes = "at an outer step" if sp.outer_step_only else "at every step"
        share = Markup("{:.1%}").format(w.largest_gap_share)
        if sp.warning:
            share += Markup("<small>above the limit</small>")
        seeds = Markup("<small>seed {}, widest of {}</small>").format(w.seed, sp.seeds)
        rows.append(
            [Markup("{}<small>{}</small>").format(sp.run, sp.method), changes, str(w.evaluations),
             Markup("{:,.0f}{}").format(w.largest_gap_tokens, seeds if sp.seeds > 1 else ""),
             share, esc(sp.rule)]
        )  # fmt: skip
    max_gap = f"{p.inputs.settings.section.max_eval_gap:.1%}"
    return render("rules_spacing", max_gap=max_gap, table=table(SPACING_HEADER, rows, (2, 3, 4)))


def _alternatives(p: Page) -> list[tuple[str, str]]:
    s = p.inputs.settings.section
    return [(rule, next(v for v in RULES[rule] if v != getattr(s, rule))) for rule in RULES]


def _base_row(base) -> list[str]:
    """The base model's row: its perplexity, evaluation s.e., tokens and steps."""
    b = base.fields
    stderr = b.get("val_loss_stderr")
    detail = ", ".join(
        part
        for part in (
            f"± {100 * math.expm1(stderr):.2g} % (evaluation s.e.)"
            if isinstance(stderr, (int, float))
            else "",
            f"{fmt(b['tokens'])} tokens" if isinstance(b.get("tokens"), (int, float)) else "",
            f"{fmt(b['steps'])} steps" if isinstance(b.get("steps"), (int, float)) else "",
        )
        if part
    )
    return ["base model", esc(detail or "every run starts here"),
            number(base.val_perplexity), "", ""]  # fmt: skip


def _target_rows(p: Page) -> list[list[str]]:
    """Each target: its level, its ratio to the unigram and bigram perplexities, its status."""
    refs = p.inputs.references
    unigram, bigram = refs.levels.get("unigram"), refs.levels.get("bigram")
    rows = []
    for t in p.found.ladder.targets:
        why = p.found.ladder.untestable.get(t)
        status = (
            verdict("not testable")
            if why
            else ("testable" if unigram is not None else "unchecked (no references)")
        )
        vs = " · ".join(
            f"{fmt_ratio(t / v)}× {n}" for n, v in (("unigram", unigram), ("bigram", bigram)) if v
        )
        label = "target" + (" (main)" if t == p.found.ladder.main else "")
        rows.append([label, esc(p.found.ladder.level_text(t)), number(t), esc(vs) or "–", status])
    return rows


def _references_source(refs) -> str:
    """How the reference perplexities were counted, or why there are none."""
    details = refs.details
    if refs.note:
        return (
            f"Reference perplexities unavailable: {refs.note}; the unigram rule could "
            "not be applied, and every verdict says so."
        )
    return (
        f"Reference perplexities of the {details.get('split', 'validation')} split, counted "
        f"on {', '.join(details.get('counts_from') or ['train'])} "
        f"({fmt(details.get('predicted_tokens'))} predicted tokens; unigram smoothing "
        f"{details.get('unigram_smoothing', '?')}, bigram smoothing "
        f"{details.get('bigram_smoothing', '?')})."
    )


def targets_section(p: Page) -> str:
    refs = p.inputs.references
    rows = []
    for name in REFERENCE_LEVELS:
        if name in refs.levels:
            rows.append([esc(name), "validation reference", number(refs.levels[name]), "", ""])
    if p.inputs.base is not None:
        rows.append(_base_row(p.inputs.base))
    rows += _target_rows(p)
    no_base = "" if p.inputs.base is not None else render("targets_no_base")
    header = ["level", "what", "perplexity", "target / reference", "status"]
    return render(
        "targets",
        references=_references_source(refs),
        no_base=no_base,
        table=table(header, rows, numeric=(2,)),
    )


def noise_section(p: Page) -> str:
    rows = [
        [
            esc(n["run"]),
            str(n["estimates"]),
            str(n["undetermined"]),
            number(n["b_simple_early"]),
            number(n["b_simple_late"]),
            number(n["asked_early"]),
            number(n["asked_late"]),
            number(n["dof"]),
        ]
        for n in p.found.noise_table
    ]
    header = ["run", "estimates", "undetermined", "B_simple early", "B_simple late",
              "batch asked early", "batch asked late", "median dof"]  # fmt: skip
    return render(
        "noise",
        figure=figure(
            p.figures.get("noise_scale"),
            "noise_scale",
            "no AdLoCo run logged batch-test statistics",
        ),
        table=table(header, rows, numeric=range(1, 8)) if rows else "",
    )


SETTING_WORDS = {
    "inner_lr": "inner lr",
    "outer_lr": "outer lr",
    "outer_momentum": "outer momentum",
    "initial_trainers": "initial trainers",
    "eta": "η",
    "merge_batch": "merge batch",
    "nesterov": "Nesterov",
}


def _setting(key: str, value: Any) -> str:
    if key == "nesterov":
        return "yes" if value else "no"
    if isinstance(value, str):
        return value
    return f"{float(value):g}"


def _point_words(point: dict[str, Any], varied: list[str]) -> str:
    """One grid point: its effective inner lr and the other settings that vary."""
    eff = point.get("effective_inner_lr")
    words = [f"lr {eff:.3g}" if eff is not None else f"inner lr {point['inner_lr']:g}"]
    words += [
        f"{SETTING_WORDS[k]} {_setting(k, point[k])}"
        for k in varied
        if k not in ("inner_lr", "nesterov")
    ]
    if "nesterov" in varied and point["nesterov"]:
        words[-1] += " (Nesterov)"
    return ", ".join(words)


def _grid_point(point: dict[str, Any], varied: list[str], chosen: bool) -> str:
    """One grid point of a method: settings, final perplexity, climb, time; bold if chosen."""
    value = fmt(point["value"]) if point["value"] is not None else "n/a"
    climb = point.get("climb")
    text = render(
        "tuning_point",
        point=esc(_point_words(point, varied)),
        value=value,
        climb=" " + render("tuning_climb", climb=f"{climb:.3f}") if climb is not None else "",
    )
    if "time_to_main_s" in point:  # a record written before the criterion was stated has none
        time = point["time_to_main_s"]
        text += (
            render("tuning_time", time=fmt(time)) if time is not None else render("tuning_never")
        )
    return render("bold", text=text) if chosen else text


def _picked(entry: dict[str, Any], point: dict[str, Any] | None) -> str:
    """The chosen point, the train settings that give it, and a flag when none was within."""
    chosen = entry["chosen"]
    keys = [*TUNED, *(k for k in MECHANISM if k in entry["varied"] and k in chosen)]
    as_set = ", ".join(f"{k} {_setting(k, chosen[k])}" for k in keys)
    picked = (
        render(
            "tuning_picked", point=esc(_point_words(point, entry["varied"])), settings=esc(as_set)
        )
        if point is not None
        else esc(as_set)
    )
    return picked if entry["within_max_climb"] else picked + " " + render("tuning_no_point")


def _sensitivity(entry: dict[str, Any], point: dict[str, Any] | None) -> str:
    """The point final perplexity would choose, with its final perplexity and the chosen one's."""
    other = next((p for p in entry["points"] if p["run"] == entry["by_final_perplexity"]), None)
    if other is None or point is None or other["run"] == point["run"]:
        return render("tuning_same")
    return render(
        "tuning_other",
        point=esc(_point_words(other, entry["varied"])),
        value=fmt(other["value"]) if other["value"] is not None else "n/a",
        chosen=fmt(point["value"]) if point["value"] is not None else "n/a",
    )


def _edges(entry: dict[str, Any]) -> str:
    """Per tuned dimension: the chosen value inside the values searched, or at an edge."""
    lines = []
    for key, edge in entry["edges"].items():
        searched = ", ".join(_setting(key, v) for v in edge["searched"])
        words = {"dimension": SETTING_WORDS[key], "chosen": _setting(key, edge["chosen"])}
        if edge["edge"]:
            nxt = ", ".join(_setting(key, v) for v in edge["next"])
            lines.append(
                render("tuning_edge", **words, side=edge["edge"], searched=searched, next=nxt)
            )
        else:
            lines.append(render("tuning_inside", **words, searched=searched))
    return Markup("<br>").join(lines)


def _configured(entry: dict[str, Any]) -> str:
    if entry["configured"] is None:
        return "–"
    if entry["differs"]:
        mine = entry["configured"]
        words = ", ".join(f"{k} {_setting(k, mine[k])}" for k in entry["differs"])
        return Markup("{} {}").format(words, render("differs"))
    return "as chosen"


def tuning_section(p: Page) -> str:
    if p.found.tuning is None:
        return render("tuning", content=render("tuning_none"))
    rows = []
    for entry in p.found.tuning:
        chosen = entry["chosen_run"]
        grid = Markup("<br>").join(
            _grid_point(pt, entry["varied"], pt["run"] == chosen) for pt in entry["points"]
        )
        point = next((pt for pt in entry["points"] if pt["run"] == chosen), None)
        rows.append(
            [
                esc(entry["run"]),
                grid,
                _picked(entry, point),
                _sensitivity(entry, point),
                _edges(entry),
                _configured(entry),
            ]
        )
    limit = p.found.tuning[0]["max_climb"] if p.found.tuning else None
    metric = p.found.tuning[0]["metric"] if p.found.tuning else "final_perplexity"
    header = ["run", "grid point: final perplexity", "chosen", "final perplexity would choose",
              "edges of the grid", "configured"]  # fmt: skip
    grid = render(
        "tuning_grid",
        path=esc(p.inputs.settings.section.tuning),
        criterion=render("tuning_criterion_time_to_main")
        if metric == "time_to_main"
        else render("tuning_criterion_final_perplexity"),
        limit=f" ({float(limit):g}× the base)" if limit is not None else "",
        table=table(header, rows),
        main=_main_note(p),
        levels=levels_note(p),
    )
    return render("tuning", content=grid)


def _main_note(p: Page) -> str:
    main = p.inputs.tuning.get("main_target") if p.inputs.tuning else None
    if not main:
        return ""
    level = main.get("level")
    configured = p.inputs.settings.main
    rule = esc(main["rule"])
    said = (
        render("tuning_main_level", level=f"{level:g}", rule=rule)
        if level is not None
        else render("tuning_main_none", rule=rule)
    )
    if configured is not None and level is not None and not math.isclose(configured, level):
        said += render(
            "tuning_main_differs", configured=f"{configured:g}", differs=render("differs")
        )
    return render("tuning_main", said=said)
