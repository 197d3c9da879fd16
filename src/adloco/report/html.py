"""The report page: one self-contained HTML file.

Last step of ``adloco report``: takes the summary rows, the claim verdicts,
the figures (PNG bytes) and the calibration and variance results, and renders
``index.html``. Figures are embedded as base64 PNG so the page can be copied
or mailed alone; it references no other file. Nothing time-dependent is
written, so the same results give the same page.
"""

from __future__ import annotations

import base64
import html
import math
from collections.abc import Iterable
from statistics import fmean
from typing import Any

from adloco.records import SUMMARY_KEYS
from adloco.report.claims import NOT_SUPPORTED, SUPPORTED, Claim, fmt
from adloco.report.inputs import Calibration, Variance
from adloco.report.summary import Roles, Target

CSS = """
body { font-family: system-ui, sans-serif; max-width: 1200px; margin: 2em auto; padding: 0 1em;
       color: #222; line-height: 1.45; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th { background: #f2f2f2; } td:first-child, th:first-child { text-align: left; }
img { max-width: 100%; border: 1px solid #eee; }
.verdict { font-weight: bold; padding: 0.05em 0.4em; border-radius: 3px; }
.supported { background: #d6f5d6; } .not-supported { background: #f9d6d6; }
.not-testable { background: #eee; }
.note { color: #666; font-size: 0.9em; }
"""

# Labels for known fields of results/variance/variance.json and calibration files;
# other fields are shown under their own names.
LABELS = {
    "trace_cov": "tr Σ (per-sample gradient variance)",
    "grad_sqnorm": "‖∇F‖² (squared full-gradient norm)",
    "b_simple": "B_simple = tr Σ / ‖∇F‖² (noise scale)",
    "norm_test_batch": "batch the norm test asks for",
    "eta": "norm test η",
    "device": "device",
    "kind": "kind",
    "method": "method",
    "memory_bytes": "device memory",
    "total_memory_bytes": "device memory",
    "nodes_per_device": "node slots per device",
    "budget_bytes": "memory budget per node slot",
    "budget_memory_bytes": "memory budget per node slot",
    "raw_max_batch": "largest batch that fits",
    "max_batch": "max batch (after margin)",
    "margin": "margin",
    "seq_len_tokens": "sequence length (tokens)",
    "vocab_size": "vocabulary",
    "model_parameters": "model parameters",
    "dtype": "dtype",
    "torch_version": "torch",
    "trials": "trials",
}


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def cell(value: Any, key: str = "") -> str:
    """A table cell: bytes in GiB/MiB, counts with separators, floats to 4 digits."""
    if value is None or value == "":
        return "–"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return esc(value)
    if key.endswith("_bytes") or key == "bytes_total" or key.endswith("bytes"):
        for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
            if abs(value) >= size:
                return f"{value / size:.3g} {unit}"
        return f"{int(value)} B"
    return esc(fmt(float(value)))


def table(header: list[str], rows: Iterable[list[str]]) -> str:
    head = "".join(f"<th>{h}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def image(png: bytes | None, alt: str, missing: str) -> str:
    if png is None:
        return f'<p class="note">Not drawn: {esc(missing)}.</p>'
    data = base64.b64encode(png).decode("ascii")
    return f'<p><img alt="{esc(alt)}" src="data:image/png;base64,{data}"></p>'


def claims_section(claims: list[Claim]) -> str:
    items = []
    for c in claims:
        css = {SUPPORTED: "supported", NOT_SUPPORTED: "not-supported"}.get(
            c.verdict, "not-testable"
        )
        details = " ".join(esc(d) for d in c.details)
        items.append(
            f"<li><p>{esc(c.statement)} <span class='verdict {css}'>{esc(c.verdict_text)}</span>"
            f"</p><p class='note'>{details}</p></li>"
        )
    return (
        "<h2 id='claims'>Claims of the paper</h2>"
        "<p class='note'>Each verdict is computed from the numbers below (docs/report.md says "
        "how). A run that never reaches the target counts as never; with several seeds, "
        "means over seeds are compared.</p><ol>" + "".join(items) + "</ol>"
    )


def _mean(values: list[Any]) -> float | None:
    numbers = [v for v in values if isinstance(v, (int, float)) and not math.isnan(v)]
    return fmean(numbers) if numbers and len(numbers) == len(values) else None


def results_section(summary: list[dict[str, Any]], roles: Roles, target: Target) -> str:
    names = list(dict.fromkeys(r["run"] for r in summary))
    keys = [*SUMMARY_KEYS, "communications_to_target", "sim_time_s_to_target"]
    role = {roles.diloco: "baseline", roles.adloco: "full AdLoCo"}
    role.update({n: f"ablation: {roles.ablation_labels.get(n, '')}" for n in roles.ablations})
    mean_rows = []
    for name in names:
        seeds = [r for r in summary if r["run"] == name]
        reached = sum(r["round_to_target"] is not None for r in seeds)
        mean_rows.append(
            [esc(name), esc(seeds[0]["method"]), esc(role.get(name, "")), str(len(seeds))]
            + [cell(_mean([r[k] for r in seeds]), k) for k in keys]
            + [f"{reached} of {len(seeds)}"]
        )
    header = [
        "run",
        "method",
        "role",
        "seeds",
        "final ppl",
        "best ppl",
        "tokens",
        "communications",
        "bytes",
        "sim. time (s)",
        "wall time (s)",
        "rounds",
        "final trainers",
        "comms to target",
        "sim. s to target",
        "seeds reaching target",
    ]
    per_seed_keys = [k for k in summary[0] if k not in ("target_perplexity",)]
    target_text = (
        f"Target perplexity: <b>{esc(fmt(target.value))}</b> ({esc(target.note)})."
        if target.value is not None
        else f"<b>No target perplexity</b>: {esc(target.note)}; the to-target columns are empty."
    )
    return (
        "<h2 id='results'>Results</h2>"
        f"<p>{target_text} A run reaches the target at the first round whose run-level "
        "perplexity (the lowest among its trainers) is at or below it.</p>"
        "<h3>Mean over seeds</h3>"
        "<p class='note'>A to-target mean is shown only when every seed reached the target."
        "</p>"
        + table(header, mean_rows)
        + "<h3>Per run and seed (summary.csv)</h3>"
        + table(per_seed_keys, ([cell(r[k], k) for k in per_seed_keys] for r in summary))
    )


def _flatten(obj: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out = []
    for key, value in obj.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out += _flatten(value, f"{name}.")
        elif isinstance(value, list):
            short = len(value) <= 8 and all(not isinstance(v, (dict, list)) for v in value)
            out.append((name, ", ".join(map(str, value)) if short else f"list of {len(value)}"))
        else:
            out.append((name, value))
    return out


def variance_section(variance: Variance, deviations: bytes | None, histograms: bytes | None) -> str:
    rows = [[esc(LABELS.get(k, k)), esc(k), cell(v, k)] for k, v in _flatten(variance.summary)]
    notes = "".join(f"<p class='note'>{esc(n)}.</p>" for n in variance.notes)
    return (
        "<h2 id='variance'>Gradient variance</h2>"
        f"<p class='note'>From {esc(variance.folder)} (the variance stage: batch gradients "
        "compared with the full gradient over a fixed sample).</p>"
        + table(["quantity", "field", "value"], rows)
        + notes
        + "<h3>Deviation of batch gradients from the full gradient</h3>"
        + image(deviations, "deviation histogram", "deviations.png not found")
        + "<h3>Per-batch table (per_batch.csv)</h3>"
        + image(histograms, "per-batch histograms", "per_batch.csv missing or not numeric")
    )


def calibration_section(calibrations: list[Calibration]) -> str:
    order = list(LABELS)
    keys: list[str] = []
    for c in calibrations:
        for k, _ in _flatten(c.fields):
            # The device name already heads the row.
            if k not in keys and k != "device":
                keys.append(k)
    first_seen = {k: i for i, k in enumerate(keys)}
    keys.sort(key=lambda k: (order.index(k) if k in order else len(order), first_seen[k]))
    rows = []
    for c in calibrations:
        flat = dict(_flatten(c.fields))
        source = esc(c.path) if c.path else "fixed in configuration (cluster.devices.max_batch)"
        rows.append([esc(c.device), source] + [cell(flat.get(k), k) for k in keys])
    return (
        "<h2 id='calibration'>Calibration</h2>"
        "<p class='note'>Largest micro-batch per node slot, as training reads it.</p>"
        + table(["device", "source"] + [esc(LABELS.get(k, k)) for k in keys], rows)
    )


def render_page(
    *,
    config_path: str,
    version: str,
    claims: list[Claim],
    summary: list[dict[str, Any]],
    roles: Roles,
    target: Target,
    figures: dict[str, bytes | None],
    variance: Variance,
    calibrations: list[Calibration],
) -> str:
    runs = list(dict.fromkeys(r["run"] for r in summary))
    seeds = sorted({r["seed"] for r in summary})
    figure_html = (
        "<h2 id='figures'>Training curves</h2>"
        "<p class='note'>Run-level validation perplexity (lowest among a run's trainers) at "
        "each evaluated round; a line is the mean over seeds, the band their min–max.</p>"
        + image(figures.get("perplexity"), "validation perplexity", "no run logged a perplexity")
        + "<h3>Batch size per trainer</h3><p class='note'>Requested (solid) and effective "
        "(dashed) global batch of each trainer (sequences per inner step over its slots), first "
        "seed of each run; dotted vertical lines are merges, "
        "circles rounds with gradient accumulation, triangles capped rounds.</p>"
        + image(figures.get("batch"), "batch per trainer", "no run logged requested_batch")
        + "<h3>Active trainers</h3>"
        + image(figures.get("trainers"), "active trainers", "no metrics rows")
        + "<h3>Ablations</h3><p class='note'>Full AdLoCo and each ablation; bars are means "
        "over seeds with min–max error bars.</p>"
        + image(figures.get("ablations"), "ablations", "no adloco run with ablations")
    )
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>AdLoCo report</title><style>{CSS}</style></head><body>"
        "<h1>AdLoCo report</h1>"
        f"<p class='note'>Configuration {esc(config_path)}; runs {esc(', '.join(runs))}; "
        f"seeds {esc(', '.join(map(str, seeds)))}; adloco {esc(version)}.</p>"
        "<p><a href='#claims'>Claims</a> · <a href='#results'>Results</a> · "
        "<a href='#figures'>Curves</a> · <a href='#variance'>Variance</a> · "
        "<a href='#calibration'>Calibration</a></p>"
        + claims_section(claims)
        + results_section(summary, roles, target)
        + figure_html
        + variance_section(variance, figures.get("deviations"), figures.get("variance"))
        + calibration_section(calibrations)
        + "</body></html>\n"
    )
