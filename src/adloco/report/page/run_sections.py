"""The page's sections on the runs: the target ladder, the per-run table, merges, mechanisms.

:func:`ladder_section`: each quantity to each target, over seeds;
:func:`per_run_section`: the per-run numbers over seeds, the merges and the
figures of the runs; :func:`mechanisms_section`: whether each AdLoCo
mechanism was seen in the runs. Part of :func:`adloco.report.page.render.render_page`;
the headings and fixed prose are ``templates/ladder.html``, ``per_run.html``,
``merges.html`` and ``mechanisms.html``.
"""

from __future__ import annotations

from markupsafe import Markup

from adloco.report.analysis.claims import (
    fmt,
)
from adloco.report.page.parts import (
    Page,
    between_words,
    esc,
    figure,
    levels_note,
    levels_of,
    number,
    spread_cell,
    table,
)
from adloco.report.page.template import render

LADDER_QUANTITIES = {
    "sim_time_s": "Simulated time to target",
    "communications": "Communications to target (trainer-rounds)",
    "tokens": "Tokens to target (all trainers)",
    "bytes": "Bytes communicated to target",
}


def _target_header(p: Page, target: float) -> str:
    head = Markup("ppl ≤ {}").format(fmt(target))
    if p.found.ladder.source == "base":
        head += Markup("<small>{}</small>").format(p.found.ladder.level_text(target))
    if target == p.found.ladder.main:
        head += " (main)"
    if target in p.found.ladder.untestable:
        head += Markup("<small>not testable: at or above unigram</small>")
    return head


def ladder_section(p: Page) -> str:
    if not p.found.ladder.targets:
        return render("ladder", content=render("ladder_none", note=esc(p.found.ladder.note)))
    targets = p.found.ladder.targets
    header = ["run", "role"] + [_target_header(p, t) for t in targets]
    parts = []
    for q, title in LADDER_QUANTITIES.items():
        rows = [
            [esc(name), esc(p.found.roles.role_of(name))]
            + [spread_cell(p.found.ladder_table[(t, name)][q], q) for t in targets]
            for name in p.found.names
        ]
        parts.append(
            render(
                "quantity",
                title=esc(title),
                table=table(header, rows, numeric=range(2, len(header))),
            )
        )
    rule = (
        render("reach_stays")
        if p.inputs.settings.section.reached == "stays"
        else render("reach_first")
    )
    content = render(
        "ladder_values",
        targets=esc(", ".join(fmt(t) for t in targets)),
        note=esc(p.found.ladder.note),
        rule=rule,
        reached=esc(p.inputs.settings.section.reached),
        between=between_words(p.inputs.settings),
        between_rule=esc(p.inputs.settings.section.between),
        figure=figure(p.figures.get("ladder"), "ladder", "no targets"),
        tables=Markup("").join(parts),
    )
    return render("ladder", content=content)


# --- per run, mechanisms -----------------------------------------------------------------


PER_RUN = [
    ("final_val_perplexity", "final perplexity", ""),
    ("eval_stderr_pct", "eval. s.e. of it (%)", ""),
    ("tokens_total", "tokens", ""),
    ("messages_total", Markup("network mes&shy;sages"), ""),
    ("bytes_total", "bytes", "bytes"),
    ("sim_time_s", "simulated time", "_s"),
    ("optimizer_steps", "optimizer steps", ""),
    ("inner_lr_sum", "Σ inner lr", ""),
    ("final_trainers", "final trainers", ""),
]


def _per_run_table(p: Page) -> str:
    """Each run's numbers over seeds, then the reference perplexities as rows of the same column."""
    rows = []
    for entry in p.found.per_run:
        row = [esc(entry["run"]), esc(p.found.roles.role_of(entry["run"])), str(entry["seeds"])]
        for key, _, unit in PER_RUN:
            row.append(spread_cell(entry[key], unit or key))
        rows.append(row)
    # The yardsticks of the final perplexity, as rows of the same column.
    for name, value in levels_of(p).items():
        kind = "the base model" if name == "base model" else "validation reference"
        rows.append([esc(name), kind, "–", number(value)] + ["–"] * (len(PER_RUN) - 1))
    header = ["run", "role", "seeds"] + [label for _, label, _ in PER_RUN]
    return table(header, rows, numeric=range(2, len(header)))


def _merges_table(p: Page) -> str:
    """Every merge of every seed: the trainers merged, their perplexities, the merged model's."""
    merge_rows = [
        [
            esc(m["run"]),
            str(m["seed"]),
            str(m["round"]),
            esc(", ".join(str(t) for t in m["merged"])) + f" → {m['kept']}",
            esc(", ".join(f"{t}: {fmt(v)}" for t, v in m["before"].items())),
            number(m["after"]),
            "–" if m["after_round"] is None else str(m["after_round"]),
        ]
        for m in p.found.merges
    ]
    if not merge_rows:
        return render("merges_none")
    header = ["run", "seed", "round", "trainers → kept", "perplexity before (by trainer)",
              "merged model", "at round"]  # fmt: skip
    return render(
        "merges", levels=levels_note(p), table=table(header, merge_rows, numeric=(1, 2, 5, 6))
    )


def per_run_section(p: Page) -> str:
    figures = {
        name: figure(p.figures.get(name), name, why) for name, why in PER_RUN_FIGURES.items()
    }
    return render(
        "per_run",
        table=_per_run_table(p),
        curves=figures["curves"],
        merges=_merges_table(p),
        merge_figure=figures["merges"],
        batch=figures["batch"],
        trainers=figures["trainers"],
        ablations=figures["ablations"],
    )


# Each figure of the per-run section (templates/figure_<name>.html) and why it may be missing.
PER_RUN_FIGURES = {
    "curves": "no run logged a perplexity",
    "merges": "the AdLoCo run has no merges",
    "batch": "no adloco run logged requested_batch",
    "trainers": "no run has more than one trainer",
    "ablations": "no AdLoCo run with ablations",
}


def mechanisms_section(p: Page) -> str:
    status_css = {"observed": "supported", "not observed": "not-supported", "off": "not-testable"}
    rows = [
        [
            esc(c.run),
            esc(c.mechanism),
            Markup("<span class='verdict {}'>{}</span>").format(status_css[c.status], c.status),
            f"{c.seeds_observed}/{c.seeds}",
            esc(c.detail),
        ]
        for c in p.found.checks
    ]
    header = ["run", "mechanism", "status", "seeds", "detail"]
    return render("mechanisms", table=table(header, rows, numeric=(3,)) if rows else "")
