"""The report page: one self-contained HTML file that fits a 1280-px browser.

Last step of ``adloco report``: renders ``index.html`` from what the other
modules computed (verdicts, ladder, regimes, per-run numbers, mechanism
checks, figures as PNG bytes, variance and calibration). Figures are embedded
as base64 PNG, so the page references no other file. The layout is a single
column at most :data:`PAGE_WIDTH_PX` wide; tables are built to wrap within
it (``tests/report/test_html.py`` checks their widths without a browser, and
``scripts/render-report.py`` renders the page in headless Chromium). Nothing
time-dependent is written, so the same results give the same page.
"""

from __future__ import annotations

import math
from typing import Any

from adloco.report.claims import (
    QUANTITY_WORDS,
    Comparison,
    fmt,
    fmt_p,
    fmt_ratio,
)
from adloco.report.html_evidence import (
    headline_section,
    noise_section,
    rules_section,
    targets_section,
    tuning_section,
)
from adloco.report.html_regimes import regime_summary, regimes_section
from adloco.report.inputs import Calibration, Variance
from adloco.report.page import (
    CSS,
    PAGE_WIDTH_PX,
    Page,
    curve_text,
    esc,
    figure,
    levels_note,
    number,
    spread_cell,
    table,
    verdict,
)
from adloco.report.regimes import ClockModel

__all__ = ["PAGE_WIDTH_PX", "PER_RUN", "Page", "regime_summary", "render_page"]

# --- the answer and the verdicts ---------------------------------------------------------


def _effect(c: Comparison) -> tuple[str, str]:
    e = c.effect
    if e is None:
        return "–", "–"
    # A ratio of 0 or ∞ is a censored median: one side never gets there.
    if e.estimate == 0:
        return "→ 0", f"{esc(c.baseline)} never gets there"
    if math.isinf(e.estimate):
        return "→ ∞", f"{esc(c.subject)} never gets there"
    est = f"{fmt_ratio(e.estimate)}×"
    i = e.interval
    if i is None:
        return est, "– (unpaired)"
    if i.kind == "none":
        return est, "n/a (1 seed)"
    return est, f"[{fmt_ratio(i.low)}, {fmt_ratio(i.high)}]<small>{esc(i.name())}</small>"


def _what(c: Comparison) -> str:
    if c.quantity == "perplexity_at_time":
        return f"perplexity at {fmt(c.time_s)} s"
    if c.quantity == "final_val_perplexity":
        return "final perplexity"
    return f"{QUANTITY_WORDS[c.quantity]} to {fmt(c.target)}"


def _against(c: Comparison) -> str:
    if c.against == "best baseline":
        return f"best baseline<small>{esc(c.baseline)}</small>"
    if c.against == "ddp anchor":
        return f"ddp anchor<small>{esc(c.baseline)} (shown, not a claim)</small>"
    return esc(c.against)


def _seeds(c: Comparison) -> str:
    e = c.effect
    if e is None:
        return "–"
    if e.pairing == "seed":
        return f"{len(e.seeds)} paired"
    return f"{len(c.subject_values)}/{len(c.against_values)}"


def comparison_rows(comparisons: list[Comparison]) -> list[list[str]]:
    rows = []
    for c in comparisons:
        est, interval = _effect(c)
        p = fmt_p(c.effect.test.p_less) if c.effect else "–"
        rows.append(
            [f"{c.claim}", _against(c), esc(_what(c)), est, interval, p, _seeds(c),
             verdict(c.verdict), esc(c.reason)]
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


def _seed_counts(p: Page) -> str:
    counts = {}
    for name, seeds in p.seeds.items():
        counts.setdefault(len(seeds), []).append(name)
    return "; ".join(f"{n} seed{'s' * (n != 1)}: {', '.join(names)}" for n, names in counts.items())


def answer_section(p: Page) -> str:
    items = []
    for c in p.claims:
        items.append(f"<li>{esc(c.statement)} {verdict(c.verdict)}<br>{esc(c.reason)}</li>")
    s = p.settings
    warnings = []
    if p.ladder.source == "derived":
        warnings.append(
            "The targets were derived from the runs after the fact, not fixed before them: "
            "a target read off the runs' own curves favours the run it was read from."
        )
    if p.ladder.main in p.ladder.untestable:
        why = p.ladder.untestable[p.ladder.main]
        warnings.append(f"The main target is not testable: {why}.")
    if p.ladder.caveat:
        warnings.append("Targets unchecked against token statistics: " + p.ladder.caveat + ".")
    reach = "stays at or below it" if s.reached == "stays" else "first gets to it"
    note = (
        f"Seeds per run — {_seed_counts(p)}. Comparisons pair runs on the seeds both have "
        f"(report.pairing: {s.pairing}); the effect is the median paired ratio, its interval "
        "the order-statistic interval named by its exact coverage; the verdict comes from the "
        f"exact sign-flip test ({s.paired_test}) at one-sided level {s.test_level:g}. A run "
        f"reaches a target when it {reach} (report.reached: {s.reached})."
    )
    return (
        "<h2 id='answer'>The answer</h2>"
        + "".join(f"<p class='warning'>{esc(w)}</p>" for w in warnings)
        + f"<ol>{''.join(items)}</ol>"
        f"<p>{esc(regime_summary(p))}</p>"
        f"<p class='note'>{esc(note)} Main target: perplexity {fmt(p.ladder.main)} "
        f"({esc(p.ladder.note)}). Clock of the runs: {esc(p.own_clock.get('text', ''))}.</p>"
    )


def claims_section(p: Page) -> str:
    heads = [c for claim in p.claims for c in claim.comparisons if claim.comparisons]
    missing = [
        f"<p>Claim {c.number}: {verdict(c.verdict)} {esc(c.reason)}</p>"
        for c in p.claims
        if not c.comparisons
    ]
    main_rows = [c for c in heads if c.headline or c.target in (p.ladder.main, None)]
    rest = [c for c in heads if c not in main_rows]
    per_seed = table(
        ["#", "AdLoCo against", "measured", "seed: AdLoCo / other"],
        [[str(c.claim), _against(c), esc(_what(c)), esc(_per_seed_text(c))] for c in main_rows],
    )
    return (
        "<h2 id='claims'>Verdicts on the paper's claims</h2>"
        "<p class='note'>AdLoCo / other: the median over paired seeds of the ratio AdLoCo / "
        "other (below 1: AdLoCo needs less, or ends lower); a seed that never reaches the "
        "target is censored and its ratio is 0 or ∞. Interval: the order-statistic interval of "
        "that median, named by its exact coverage (with few seeds, the range over seeds). p: "
        "the exact one-sided p-value of the sign-flip test that AdLoCo needs less. Supported: "
        f"p ≤ {p.settings.test_level:g}; not supported: p ≤ {p.settings.test_level:g} the other "
        "way, or the interval not below 1; inconclusive otherwise; not testable: a target at "
        "or above the unigram perplexity, a clock linear in tokens, or neither run getting "
        "there. The best baseline is the one with the lowest median, chosen on these data. "
        "The ddp anchor is compared but is not a baseline of the claims: it shows the quality "
        "that low-communication methods trade away.</p>"
        + "".join(missing)
        + (
            "<h3>At the main target, and at equal simulated time</h3>"
            + table(COMPARISON_HEADER, comparison_rows(main_rows), numeric=(0, 3, 5))
            + "<details><summary>Each seed's values of these comparisons</summary>"
            + per_seed
            + "</details>"
            if main_rows
            else ""
        )
        + (
            "<details><summary>The same at every other target "
            f"({len(rest)} comparisons)</summary>"
            + table(COMPARISON_HEADER, comparison_rows(rest), numeric=(0, 3, 5))
            + "</details>"
            if rest
            else ""
        )
    )


# --- ladder and regimes ------------------------------------------------------------------


LADDER_QUANTITIES = {
    "sim_time_s": "Simulated time to target",
    "communications": "Communications to target (trainer-rounds)",
    "tokens": "Tokens to target (all trainers)",
    "bytes": "Bytes communicated to target",
}


def _target_header(p: Page, target: float) -> str:
    head = f"ppl ≤ {fmt(target)}"
    if p.ladder.source == "base":
        head += f"<small>{esc(p.ladder.level_text(target))}</small>"
    if target == p.ladder.main:
        head += " (main)"
    if target in p.ladder.untestable:
        head += "<small>not testable: at or above unigram</small>"
    return head


def ladder_section(p: Page) -> str:
    if not p.ladder.targets:
        return f"<h2 id='ladder'>Target ladder</h2><p>{esc(p.ladder.note)}.</p>"
    targets = p.ladder.targets
    header = ["run", "role"] + [_target_header(p, t) for t in targets]
    parts = []
    for q, title in LADDER_QUANTITIES.items():
        rows = [
            [esc(name), esc(p.roles.role_of(name))]
            + [spread_cell(p.ladder_table[(t, name)][q], q) for t in targets]
            for name in p.run_names
        ]
        parts.append(f"<h3>{esc(title)}</h3>" + table(header, rows, numeric=range(2, len(header))))
    rule = (
        "at the first evaluated round from which every later evaluation of its run-level "
        "perplexity (lowest among its active trainers) is at or below it"
        if p.settings.reached == "stays"
        else "at the first evaluated round whose run-level perplexity (lowest among its active "
        "trainers) is at or below it"
    )
    return (
        "<h2 id='ladder'>Target ladder</h2>"
        f"<p class='note'>Targets: {esc(', '.join(fmt(t) for t in targets))} "
        f"({esc(p.ladder.note)}). A run reaches a target {rule} (report.reached: "
        f"{esc(p.settings.reached)}). Each cell: median over seeds, below it min – max; a seed "
        "that never reaches the target within the token budget is censored (&gt; budget) and "
        "counted, never averaged in.</p>"
        + figure(
            p.figures.get("ladder"),
            "time and communications to each target",
            "Read along each line from left to right: how much more each run spends as the "
            "target gets harder; bars are the min–max over seeds.",
            "no targets",
        )
        + "".join(parts)
    )


# --- per run, mechanisms -----------------------------------------------------------------


PER_RUN = [
    ("final_val_perplexity", "final perplexity", ""),
    ("eval_stderr_pct", "eval. s.e. of it (%)", ""),
    ("tokens_total", "tokens", ""),
    ("communications", "communi&shy;cations", ""),
    ("bytes_total", "bytes", "bytes"),
    ("sim_time_s", "simulated time", "_s"),
    ("optimizer_steps", "optimizer steps", ""),
    ("inner_lr_sum", "Σ inner lr", ""),
    ("final_trainers", "final trainers", ""),
]


def per_run_section(p: Page) -> str:
    rows = []
    for entry in p.per_run:
        row = [esc(entry["run"]), esc(p.roles.role_of(entry["run"])), str(entry["seeds"])]
        for key, _, unit in PER_RUN:
            row.append(spread_cell(entry[key], unit or key))
        rows.append(row)
    # The yardsticks of the final perplexity, as rows of the same column.
    for name, value in p.levels().items():
        kind = "the base model" if name == "base model" else "validation reference"
        rows.append([esc(name), kind, "–", number(value)] + ["–"] * (len(PER_RUN) - 1))
    header = ["run", "role", "seeds"] + [label for _, label, _ in PER_RUN]
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
        for m in p.merges
    ]
    merges_html = (
        "<h3>Merges</h3><p class='note'>Each trainer is evaluated after its outer step; the "
        "merged model is evaluated right after the merge, in the same round.</p>"
        + levels_note(p)
        + table(
            [
                "run",
                "seed",
                "round",
                "trainers → kept",
                "perplexity before (by trainer)",
                "merged model",
                "at round",
            ],
            merge_rows,
            numeric=(1, 2, 5, 6),
        )  # fmt: skip
        if merge_rows
        else "<p class='note'>No merges in any run.</p>"
    )
    return (
        "<h2 id='runs'>Per run</h2>"
        "<p class='note'>Median over seeds, min – max below. Optimizer steps and Σ inner lr: "
        "per round the largest among the run's trainers, summed over rounds (the steps a model "
        "takes from start to end, and how far its learning rate carried it). Bytes: what a real "
        "deployment moves (ring all-reduces and merges). Eval. s.e.: the standard error of the "
        "final perplexity from the finite validation sample (exp of the loss's standard error, "
        "minus 1); set it beside the final perplexity's min – max over seeds to see whether "
        "evaluation noise or training noise dominates.</p>"
        + table(header, rows, numeric=range(2, len(header)))
        + figure(
            p.figures.get("curves"),
            "perplexity curves",
            "Lower is better at every x: compare where the lines cross the dotted main target; "
            "bands are min–max over seeds, triangles are merges; dashed lines are the reference "
            "perplexities and the base model.",
            "no run logged a perplexity",
        )
        + merges_html
        + figure(
            p.figures.get("merges"),
            "perplexity of each trainer around merges",
            "Each trainer's own perplexity; dotted lines are merges and the circle is the merged "
            "model's first evaluation: look whether it is above or below its parents.",
            "the AdLoCo run has no merges",
        )
        + figure(
            p.figures.get("batch"),
            "batch per trainer",
            "Requested (solid) and effective (dashed) global batch, first seed: look for growth, "
            "and for circles (accumulation) and triangles (capped) where switch mode engages.",
            "no adloco run logged requested_batch",
        )
        + figure(
            p.figures.get("trainers"),
            "active trainers",
            "Trainers alive per round (median over seeds): each step down is a merge.",
            "no run has more than one trainer",
        )
        + figure(
            p.figures.get("ablations"),
            "AdLoCo and its ablations",
            "Each dot a seed, the bar the median: an ablation to the right of AdLoCo is slower "
            "(left panel) or ends worse (right panel).",
            "no AdLoCo run with ablations",
        )
    )


def mechanisms_section(p: Page) -> str:
    status_css = {"observed": "supported", "not observed": "not-supported", "off": "not-testable"}
    rows = [
        [
            esc(c.run),
            esc(c.mechanism),
            f"<span class='verdict {status_css[c.status]}'>{esc(c.status)}</span>",
            f"{c.seeds_observed}/{c.seeds}",
            esc(c.detail),
        ]
        for c in p.checks
    ]
    return (
        "<h2 id='mechanisms'>Mechanism checks</h2>"
        "<p class='note'>Whether each AdLoCo component acted in these runs — not claims of the "
        'paper: a component can act and still not make AdLoCo faster. "off": the run turns '
        "the component off.</p>"
        + (
            table(["run", "mechanism", "status", "seeds", "detail"], rows, numeric=(3,))
            if rows
            else ""
        )
    )


# --- variance and calibration ------------------------------------------------------------

# (field path in variance.json, quantity in words, unit)
VARIANCE_FIELDS = [
    ("trace_cov", "per-sample gradient variance tr Σ (exact, over the fixed sample)",
     "squared gradient norm"),
    ("grad_sqnorm", "squared norm of the full gradient ‖∇F‖²", "squared gradient norm"),
    ("b_simple", "noise scale B_simple = tr Σ / ‖∇F‖²", "sequences"),
    ("eta", "norm-test η", "–"),
    ("norm_test_batch", "batch the norm test asks for, tr Σ / (η² ‖∇F‖²)", "sequences"),
    ("cheap.trace_cov", "tr Σ as the engine estimates it (cheap estimator)",
     "squared gradient norm"),
    ("cheap.b_simple", "B_simple from the engine's estimates", "sequences"),
    ("cheap.norm_test_batch", "norm-test batch from the engine's estimates", "sequences"),
    ("scalar_vs_pooled.iqr_ratio.trace_cov",
     "spread of tr Σ reduced as scalars relative to pooled vectors (IQR ratio)", "×"),
    ("full_loss", "loss of the initial model on the fixed sample", "nats per token"),
    ("eval_sequences", "sequences in the fixed sample", "sequences"),
    ("batch_size", "sequences per batch gradient", "sequences"),
    ("num_batches", "batch gradients drawn", "count"),
    ("rms_deviation", "RMS distance of a batch gradient from the full gradient (measured)",
     "gradient norm"),
    ("theoretical_rms_deviation", "the same, expected from tr Σ", "gradient norm"),
    ("deviation_excess_kurtosis", "excess kurtosis of those distances", "–"),
]  # fmt: skip


def _lookup(obj: dict, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(obj, dict) or part not in obj:
            return None
        obj = obj[part]
    return obj


def variance_section(variance: Variance, deviations: bytes | None, histograms: bytes | None) -> str:
    rows = []
    for path, words, unit in VARIANCE_FIELDS:
        value = _lookup(variance.summary, path)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            rows.append([esc(words), number(value), esc(unit)])
    shown = {p.split(".")[0] for p, _, _ in VARIANCE_FIELDS if "." not in p}
    other = sorted(
        k
        for k, v in variance.summary.items()
        if k not in shown and isinstance(v, (int, float)) and not isinstance(v, bool)
    )
    notes = "".join(f"<p class='note'>{esc(n)}.</p>" for n in variance.notes)
    return (
        "<h2 id='variance'>Gradient variance at the initial model</h2>"
        f"<p class='note'>From {esc(variance.folder)}: batch gradients compared with the full "
        "gradient of a fixed sample. Gradient norms are Euclidean norms over all parameters of "
        "the gradient of the mean per-token loss.</p>"
        + table(["quantity", "value", "unit"], rows, numeric=(1,))
        + (
            f"<p class='note'>Other numeric fields of variance.json: {esc(', '.join(other))}.</p>"
            if other
            else ""
        )
        + notes
        + figure(
            deviations,
            "deviation histogram",
            "Distances of batch gradients from the full gradient, as the variance stage drew "
            "them: the measured spread should match the one expected from tr Σ.",
            "deviations.png not found",
        )
        + figure(
            histograms,
            "per-batch histograms",
            "Histograms of the per-batch table: look for outliers and skew.",
            "per_batch.csv missing or not numeric",
        )
    )


CALIBRATION_FIELDS = [
    ("kind", "kind", ""),
    ("memory_bytes", "device memory", "bytes"),
    ("budget_bytes", "memory per slot", "bytes"),
    ("raw_max_batch", "largest batch that fits", ""),
    ("max_batch", "max batch (after margin)", ""),
    ("margin", "margin", ""),
    ("seq_len_tokens", "sequence length (tokens)", ""),
    ("model_parameters", "model parameters", ""),
    ("step_time.model", "step-time model", ""),
]


def calibration_section(calibrations: list[Calibration], models: list[ClockModel]) -> str:
    rows = []
    for c in calibrations:
        source = "calibration file" if c.path else "configured max_batch"
        row = [esc(c.device), source]
        for key, _, unit in CALIBRATION_FIELDS:
            row.append(number(_lookup(c.fields, key), unit))
        rows.append(row)
    header = ["device", "source"] + [label for _, label, _ in CALIBRATION_FIELDS]
    curve_rows = []
    for m in models:
        for device, curve in (m.curves or {}).items():
            curve_rows.append([esc(m.label), esc(device), esc(curve_text(curve))])
    return (
        "<h2 id='calibration'>Calibration</h2>"
        "<p class='note'>Largest micro-batch per node slot, as training reads it, and the "
        "step-time curves of the clock models (seconds of one forward and backward pass by "
        "micro-batch, of one optimizer update).</p>"
        + table(header, rows, numeric=range(2, len(header)))
        + (table(["clock model", "device", "curve"], curve_rows) if curve_rows else "")
    )


def method_section(p: Page) -> str:
    return (
        "<h2 id='method'>How this page is made</h2>"
        f"<p class='note'>adloco {esc(p.version)}, configuration {esc(p.config_path)}. Roles: "
        + esc(
            "; ".join(
                f"{label} {', '.join(v) if isinstance(v, list) else v}"
                + (f" ({p.roles.sources[key]})" if key in p.roles.sources else "")
                for label, key, v in (
                    ("AdLoCo", "adloco", p.roles.adloco),
                    ("DiLoCo", "diloco", p.roles.diloco),
                    ("ddp anchor", "ddp", p.roles.ddp),
                    ("baselines", "baselines", p.roles.baselines),
                    ("ablations", "ablations", p.roles.ablations),
                    ("variants", "variants", p.roles.variants),
                )
                if v
            )
        )
        + ". docs/report.md states how every table and figure is computed; "
        "<code>adloco report</code> rebuilds this page from the results, "
        "<code>scripts/render-report.py</code> renders it to PNG.</p>"
    )


def render_page(p: Page) -> str:
    nav = " ".join(
        f"<a href='#{k}'>{v}</a>"
        for k, v in (
            ("answer", "Answer"),
            ("claims", "Verdicts"),
            ("seeds", "Seeds"),
            ("rules", "Rules"),
            ("targets", "Targets"),
            ("ladder", "Target ladder"),
            ("regimes", "Regimes"),
            ("runs", "Per run"),
            ("noise", "Noise scale"),
            ("tuning", "Tuning"),
            ("mechanisms", "Mechanisms"),
            ("variance", "Variance"),
            ("calibration", "Calibration"),
            ("method", "Method"),
        )
    )
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>AdLoCo report</title><style>{CSS}</style></head><body>"
        "<h1>AdLoCo against DiLoCo: report</h1>"
        f"<p class='note'>Runs {esc(', '.join(p.run_names))}; {esc(_seed_counts(p))}; "
        f"configuration {esc(p.config_path)}.</p>"
        f"<nav>{nav}</nav>"
        + answer_section(p)
        + claims_section(p)
        + headline_section(p)
        + rules_section(p)
        + targets_section(p)
        + ladder_section(p)
        + regimes_section(p)
        + per_run_section(p)
        + noise_section(p)
        + tuning_section(p)
        + mechanisms_section(p)
        + variance_section(p.variance, p.figures.get("deviations"), p.figures.get("variance"))
        + calibration_section(p.calibrations, p.clock_models)
        + method_section(p)
        + "</body></html>\n"
    )
