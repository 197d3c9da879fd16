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

import base64
import html
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from adloco.report.claims import (
    INCONCLUSIVE,
    NOT_SUPPORTED,
    NOT_TESTABLE,
    QUANTITY_WORDS,
    SUPPORTED,
    Claim,
    Comparison,
    fmt,
    fmt_ratio,
)
from adloco.report.inputs import Calibration, Variance
from adloco.report.ladder import Ladder
from adloco.report.mechanisms import Check
from adloco.report.regimes import CLOCK_LABELS, ClockModel, RegimeCell
from adloco.report.settings import ReportSettings, Roles
from adloco.report.stats import Spread

PAGE_WIDTH_PX = 1200  # content width; with the margins the page needs 1232 px

CSS = f"""
body {{ font-family: system-ui, sans-serif; font-size: 15px; max-width: {PAGE_WIDTH_PX}px;
       margin: 1.5em auto; padding: 0 16px; color: #222; line-height: 1.45; }}
h1 {{ font-size: 1.6em; }} h2 {{ border-bottom: 1px solid #ddd; margin-top: 1.8em; }}
table {{ border-collapse: collapse; margin: 0.6em 0; font-size: 13px; max-width: 100%; }}
th, td {{ border: 1px solid #ccc; padding: 3px 6px; text-align: left; vertical-align: top;
         overflow-wrap: break-word; }}
th {{ background: #f2f2f2; }}
td.n, th.n {{ text-align: right; }} td.n {{ white-space: nowrap; }}
td small {{ display: block; white-space: normal; color: #666; font-size: 11px; }}
figure {{ margin: 0.8em 0; }}
img {{ max-width: 100%; height: auto; border: 1px solid #eee; }}
figcaption {{ color: #444; font-size: 13px; }}
.verdict {{ font-weight: bold; padding: 0 4px; border-radius: 3px; white-space: nowrap; }}
.supported, .holds {{ background: #d6f5d6; }} .not-supported, .fails {{ background: #f9d6d6; }}
.inconclusive, .unclear {{ background: #fff3c4; }} .not-testable {{ background: #eee; }}
.own {{ outline: 2px solid #333; outline-offset: -2px; }}
.note {{ color: #555; font-size: 13px; }}
details > summary {{ cursor: pointer; color: #235; }}
nav a {{ margin-right: 0.8em; }}
"""

VERDICT_CSS = {
    SUPPORTED: "supported",
    NOT_SUPPORTED: "not-supported",
    INCONCLUSIVE: "inconclusive",
    NOT_TESTABLE: "not-testable",
}


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def human_bytes(value: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(value) >= size:
            return f"{value / size:.3g} {unit}"
    return f"{int(value)} B"


def number(value: Any, quantity: str = "") -> str:
    """A value in the unit of its quantity: bytes in KiB/MiB/GiB, seconds, counts, else 4 digits."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return esc(value)
    if math.isinf(value):
        return "never"
    if "bytes" in quantity:
        return human_bytes(value)
    if quantity.endswith("_s"):
        return f"{value:.3g} s"
    return esc(fmt(float(value)))


def verdict(text: str) -> str:
    return f"<span class='verdict {VERDICT_CSS.get(text, 'not-testable')}'>{esc(text)}</span>"


def table(header: list[str], rows: Iterable[list[str]], numeric: Iterable[int] = ()) -> str:
    """A table; cells are HTML already. Columns in ``numeric`` are right-aligned, unbroken."""
    right = set(numeric)

    def attrs(i: int) -> str:
        return " class='n'" if i in right else ""

    head = "".join(f"<th{attrs(i)}>{h}</th>" for i, h in enumerate(header))
    body = "".join(
        "<tr>" + "".join(f"<td{attrs(i)}>{c}</td>" for i, c in enumerate(row)) + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def figure(png: bytes | None, alt: str, caption: str, missing: str) -> str:
    """An embedded PNG with a one-line caption saying what to look at."""
    if png is None:
        return f"<p class='note'>Not drawn: {esc(missing)}.</p>"
    data = base64.b64encode(png).decode("ascii")
    return (
        f"<figure><img alt='{esc(alt)}' src='data:image/png;base64,{data}'>"
        f"<figcaption>{caption}</figcaption></figure>"
    )


def spread_cell(s: Spread, quantity: str) -> str:
    """Median over seeds with its range below; censored seeds shown, never averaged."""
    if s.seeds == 0:
        return "–"
    if s.reached == 0:
        return f"&gt; budget<small>0/{s.seeds} seeds reached</small>"
    mid = number(s.median, quantity) if math.isfinite(s.median) else "&gt; budget"
    high = number(s.high, quantity) if math.isfinite(s.high) else "&gt; budget"
    if s.seeds == 1:
        return mid
    reached = "" if s.reached == s.seeds else f" · {s.reached}/{s.seeds} reached"
    return f"{mid}<small>{number(s.low, quantity)} – {high}{reached}</small>"


@dataclass
class Page:
    """Everything the page shows, computed by :func:`adloco.report.build_report`."""

    config_path: str
    version: str
    run_names: list[str]
    seeds: list[int]
    roles: Roles
    settings: ReportSettings
    ladder: Ladder
    claims: list[Claim]
    ladder_table: dict
    regimes: list[RegimeCell]
    clock_models: list[ClockModel]
    own_clock: dict[str, Any]
    clock_reason: str
    per_run: list[dict[str, Any]]
    merges: list[dict[str, Any]]
    checks: list[Check]
    figures: dict[str, bytes | None]
    variance: Variance
    calibrations: list[Calibration]


# --- the answer and the verdicts ---------------------------------------------------------


def _effect(c: Comparison) -> tuple[str, str]:
    i = c.interval
    if i is None:
        return "–", "–"
    if c.effect_kind == "difference":
        est = f"{i.estimate:+.3g} ppl"
        ci = "–" if i.low is None else f"[{i.low:+.3g}, {i.high:+.3g}]"
        return est, ci
    # A ratio of 0 or ∞ is a censored median: one side never reaches the target.
    if i.estimate == 0:
        return "→ 0", f"{esc(c.against)} never reaches"
    if math.isinf(i.estimate):
        return "→ ∞", f"{esc(c.subject)} never reaches"
    est = f"{fmt_ratio(i.estimate)}×"
    ci = "n/a (1 seed)" if i.low is None else f"[{fmt_ratio(i.low)}, {fmt_ratio(i.high)}]"
    return est, ci


def _what(c: Comparison) -> str:
    if c.quantity == "final_val_perplexity":
        return "final perplexity"
    return f"{QUANTITY_WORDS[c.quantity]} to {fmt(c.target)}"


def _against(c: Comparison) -> str:
    if c.against == "best baseline":
        return f"best baseline<small>{esc(c.baseline)}</small>"
    return esc(c.against)


def comparison_rows(comparisons: list[Comparison]) -> list[list[str]]:
    rows = []
    for c in comparisons:
        est, ci = _effect(c)
        n = f"{len(c.subject_values)}/{len(c.against_values)}"
        rows.append(
            [f"{c.claim}", _against(c), esc(_what(c)), est, ci, n, verdict(c.verdict),
             esc(c.reason)]
        )  # fmt: skip
    return rows


COMPARISON_HEADER = [
    "#",
    "AdLoCo against",
    "measured",
    "AdLoCo / other",
    "CI",
    "seeds",
    "verdict",
    "why",
]


def regime_summary(p: Page) -> str:
    """One sentence: where, at the main target, the wall-clock claim holds against DiLoCo."""
    cells = [c for c in p.regimes if c.target == p.ladder.main and c.against == "diloco"]
    if not cells:
        return "No regime sweep (no AdLoCo and DiLoCo runs, no target or no clock curves)."
    parts = []
    for clock in dict.fromkeys(c.clock for c in cells):
        for sharing in dict.fromkeys(c.sharing for c in cells):
            line = sorted(
                (c for c in cells if c.clock == clock and c.sharing == sharing),
                key=lambda c: c.bandwidth_gbit_s,
            )
            holds = [c.bandwidth_gbit_s for c in line if c.holds == "holds"]
            fails = [c.bandwidth_gbit_s for c in line if c.holds == "fails"]
            where = (
                "at every bandwidth"
                if len(holds) == len(line)
                else "at no bandwidth"
                if not holds
                else f"at {_bw(min(holds))}–{_bw(max(holds))}"
            )
            tail = f" (AdLoCo slower at {len(fails)} of {len(line)})" if fails else ""
            parts.append(f"{CLOCK_LABELS[clock]}, {sharing.replace('_', ' ')}: {where}{tail}")
    return (
        f"Where AdLoCo is faster than DiLoCo to perplexity {fmt(p.ladder.main)} with the "
        f"{round(p.settings.confidence * 100)} % CI below 1 — " + "; ".join(parts) + "."
    )


def _bw(gbit: float) -> str:
    if gbit >= 1:
        return f"{gbit:.3g} Gbit/s"
    return f"{gbit * 1000:.3g} Mbit/s"


def answer_section(p: Page) -> str:
    items = []
    for c in p.claims:
        items.append(f"<li>{esc(c.statement)} {verdict(c.verdict)}<br>{esc(c.reason)}</li>")
    seeds = len(p.seeds)
    seed_note = (
        "One seed per run: every verdict that needs a spread over seeds is inconclusive."
        if seeds == 1
        else f"{seeds} seeds per run; effects are ratios of medians over seeds with "
        f"{round(p.settings.confidence * 100)} % bootstrap intervals "
        f"({p.settings.bootstrap_samples} samples, seed {p.settings.bootstrap_seed})."
    )
    return (
        "<h2 id='answer'>The answer</h2>"
        f"<ol>{''.join(items)}</ol>"
        f"<p>{esc(regime_summary(p))}</p>"
        f"<p class='note'>{esc(seed_note)} Main target: perplexity {fmt(p.ladder.main)} "
        f"({esc(p.ladder.note)}). Clock of the runs: {esc(p.own_clock.get('text', ''))}.</p>"
    )


def claims_section(p: Page) -> str:
    heads = [c for claim in p.claims for c in claim.comparisons if claim.comparisons]
    missing = [
        f"<p>Claim {c.number}: {verdict(c.verdict)} {esc(c.reason)}</p>"
        for c in p.claims
        if not c.comparisons
    ]
    main_rows = [c for c in heads if c.headline or c.target == p.ladder.main]
    rest = [c for c in heads if c not in main_rows]
    return (
        "<h2 id='claims'>Verdicts on the paper's claims</h2>"
        "<p class='note'>AdLoCo / other: ratio of the medians over seeds (below 1: AdLoCo "
        "needs less); for final perplexity, the difference ablation − AdLoCo (above 0: the "
        "ablation is worse). Supported: the whole CI is on AdLoCo's side; not supported: the "
        "whole CI is on the other side or at 1; inconclusive: the CI contains 1 (or 0), or "
        "one seed. The best baseline is chosen per target and per bootstrap sample.</p>"
        + "".join(missing)
        + (
            "<h3>At the main target</h3>"
            + table(COMPARISON_HEADER, comparison_rows(main_rows), numeric=(0, 3, 4, 5))
            if main_rows
            else ""
        )
        + (
            "<details><summary>The same at every other target of the ladder "
            f"({len(rest)} comparisons)</summary>"
            + table(COMPARISON_HEADER, comparison_rows(rest), numeric=(0, 3, 4, 5))
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


def ladder_section(p: Page) -> str:
    if not p.ladder.targets:
        return f"<h2 id='ladder'>Target ladder</h2><p>{esc(p.ladder.note)}.</p>"
    targets = p.ladder.targets
    header = ["run", "role"] + [
        f"ppl ≤ {fmt(t)}" + (" (main)" if t == p.ladder.main else "") for t in targets
    ]
    parts = []
    for q, title in LADDER_QUANTITIES.items():
        rows = [
            [esc(name), esc(p.roles.role_of(name))]
            + [spread_cell(p.ladder_table[(t, name)][q], q) for t in targets]
            for name in p.run_names
        ]
        parts.append(f"<h3>{esc(title)}</h3>" + table(header, rows, numeric=range(2, len(header))))
    return (
        "<h2 id='ladder'>Target ladder</h2>"
        f"<p class='note'>Targets: {esc(', '.join(fmt(t) for t in targets))} "
        f"({esc(p.ladder.note)}). A run reaches a target at the first evaluated round whose "
        "run-level perplexity (lowest among its active trainers) is at or below it. Each cell: "
        "median over seeds, below it min – max; a seed that never reaches the target within "
        "the token budget is censored (&gt; budget) and counted, never averaged in.</p>"
        + figure(
            p.figures.get("ladder"),
            "time and communications to each target",
            "Read along each line from left to right: how much more each run spends as the "
            "target gets harder; bars are the min–max over seeds.",
            "no targets",
        )
        + "".join(parts)
    )


def _regime_table(p: Page, against: str) -> str:
    cells = [c for c in p.regimes if c.target == p.ladder.main and c.against == against]
    if not cells:
        return ""
    bws = sorted({c.bandwidth_gbit_s for c in cells})
    keys = list(dict.fromkeys((c.clock, c.sharing) for c in cells))
    rows = []
    for clock, sharing in keys:
        row = [esc(CLOCK_LABELS[clock]), esc(sharing.replace("_", " "))]
        for bw in bws:
            c = next(
                (
                    x
                    for x in cells
                    if (x.clock, x.sharing, x.bandwidth_gbit_s) == (clock, sharing, bw)
                ),
                None,
            )
            if c is None:
                row.append("–")
                continue
            i = c.interval
            ci = (
                "" if i.low is None else f"<small>[{fmt_ratio(i.low)}, {fmt_ratio(i.high)}]</small>"
            )
            cls = c.holds + (" own" if c.own else "")
            row.append(f"<span class='{cls}'>{fmt_ratio(i.estimate)}</span>{ci}")
        rows.append(row)
    header = ["clock", "slot sharing"] + [esc(_bw(b)) for b in bws]
    # Highlight classes sit on the span; the cell colour comes from the same class.
    body = table(header, rows, numeric=range(2, len(header)))
    for cls in ("holds", "fails", "unclear"):
        body = body.replace(
            f"<td class='n'><span class='{cls}", f"<td class='n {cls}'><span class='{cls}"
        )
    title = "against DiLoCo" if against == "diloco" else "against the best baseline of each cell"
    return f"<h3>AdLoCo / baseline time to perplexity {fmt(p.ladder.main)}, {title}</h3>" + body


def regimes_section(p: Page) -> str:
    models = "".join(
        f"<li><b>{esc(m.label)}</b>: "
        + esc(m.note or ", ".join(f"{d}: {_curve_text(c)}" for d, c in (m.curves or {}).items()))
        + "</li>"
        for m in p.clock_models
    )
    return (
        "<h2 id='regimes'>Regimes: where the wall-clock claim holds</h2>"
        f"<p>{esc(regime_summary(p))}</p>"
        "<p class='note'>No retraining: each run's simulated time is recomputed from the work "
        "its metrics rows record (adloco.clock.recompute_sim_time_s) under each clock model, "
        "slot-sharing policy and bandwidth (latency as configured); the round at which a run "
        "reaches the target does not change. Cell: ratio of medians over seeds, AdLoCo / "
        "baseline, CI below; green: CI below 1 (the claim holds), red: CI at or above 1, "
        "yellow: unclear or one seed. The outlined cell is the runs' own setting.</p>"
        f"<ul class='note'>{models}</ul>"
        + figure(
            p.figures.get("regimes"),
            "time-to-target ratio across bandwidths",
            "Below the line at 1 AdLoCo is faster: look for the bandwidths where each clock's "
            "band leaves 1; the star is the setting the runs were trained under.",
            "no regime cells",
        )
        + _regime_table(p, "diloco")
        + _regime_table(p, "best")
    )


def _curve_text(c) -> str:
    pts = ", ".join(f"{b}: {t:.3g} s" for b, t in zip(c.batches, c.fwd_bwd_s, strict=True))
    return f"pass time by micro-batch {pts}; update {c.update_s:.3g} s"


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
            "bands are min–max over seeds, triangles are merges.",
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
            curve_rows.append([esc(m.label), esc(device), esc(_curve_text(curve))])
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
            ("ladder", "Target ladder"),
            ("regimes", "Regimes"),
            ("runs", "Per run"),
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
        f"<p class='note'>Runs {esc(', '.join(p.run_names))}; seeds "
        f"{esc(', '.join(map(str, p.seeds)))}; configuration {esc(p.config_path)}.</p>"
        f"<nav>{nav}</nav>"
        + answer_section(p)
        + claims_section(p)
        + ladder_section(p)
        + regimes_section(p)
        + per_run_section(p)
        + mechanisms_section(p)
        + variance_section(p.variance, p.figures.get("deviations"), p.figures.get("variance"))
        + calibration_section(p.calibrations, p.clock_models)
        + method_section(p)
        + "</body></html>\n"
    )
