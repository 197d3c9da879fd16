"""What the report finds, computed once from its inputs, before any table, figure or page.

:func:`compute_findings` assigns the runs' roles, fixes the targets, runs the
regime sweeps, judges the claims (and each under the other rules) and
computes the per-run numbers the tables, the figures and the page read:
everything the report says is in :class:`Findings`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from adloco.config import ClusterConfig
from adloco.formats.metrics import finite_or_none
from adloco.report.analysis.about import about_rows
from adloco.report.analysis.claims import Claim, Context, evaluate_claims, headline_runs
from adloco.report.analysis.gain import GainShares, gain_shares
from adloco.report.analysis.headline import Headline, headline_table
from adloco.report.analysis.ladder import ladder_table
from adloco.report.analysis.mechanisms import Check, mechanism_checks
from adloco.report.analysis.noise import noise_rows, noise_summary
from adloco.report.analysis.regime_replay import Regimes, bring, compute_regimes
from adloco.report.analysis.regime_sweep import ClockModel, is_linear
from adloco.report.analysis.sensitivity import attach_alternatives
from adloco.report.analysis.spacing import Spacing, eval_spacing
from adloco.report.analysis.summary import merges, per_run_entries, summary_rows
from adloco.report.analysis.targets import Ladder, build_ladder
from adloco.report.analysis.tuning import MECHANISM, TUNED, tuning_table
from adloco.report.analysis.workers_map import WorkersMap, workers_map
from adloco.report.inputs import Inputs
from adloco.report.settings import Roles, assign_roles

log = logging.getLogger(__name__)


def own_clock(cluster: ClusterConfig, models: list[ClockModel]) -> tuple[dict, str]:
    """The clock the runs were charged with, and why it cannot test the time claim (or "")."""
    network = cluster.network
    sharing = cluster.slot_sharing
    run_model = next((m for m in models if m.key == "run"), None)
    text = (
        f"each device's step-time curve, slots {sharing.replace('_', ' ')}, "
        f"{network.bandwidth_gbit_s:g} Gbit/s, latency {network.latency_s:g} s"
    )
    reason = ""
    if (
        run_model is not None
        and run_model.curves
        and all(is_linear(c) for c in run_model.curves.values())
    ):
        reason = (
            "the runs' clock charges compute in proportion to tokens (every device's step-time "
            "curve is linear with free updates), so simulated time follows token count and "
            "cannot show the device-utilisation gain the paper claims; the regime section "
            "recomputes time under other clocks"
        )
        text += " (linear in tokens)"
    return {
        "text": text,
        "slot_sharing": sharing,
        "bandwidth_gbit_s": network.bandwidth_gbit_s,
        "latency_s": network.latency_s,
    }, reason


@dataclass
class Findings:
    """What the report computes from its inputs, before any table, figure or page."""

    roles: Roles
    ladder: Ladder
    regimes: Regimes
    clock: dict[str, Any]
    clock_reason: str
    claims: list[Claim]
    headline: Headline | None
    checks: list[Check]
    summary: list[dict]
    ladder_table: dict
    names: list[str]  # every run, in configuration order
    adloco_runs: list[str]  # the runs of method adloco
    noise: list[dict]  # noise_scale.csv: every B_simple estimate along the AdLoCo runs
    levels: dict[str, float]  # reference perplexities and the base model's
    gains: GainShares  # each run's share of ddp's gain and its climb
    workers: WorkersMap  # DiLoCo's splits of ddp's global batch
    spacing: list[Spacing]  # each headline run's evaluation spacing
    seeds: dict[str, list[int]]  # run -> its seeds
    per_run: list[dict[str, Any]]  # per run: the spread over seeds of each per-run number
    merges: list[dict[str, Any]]  # every merge of every seed
    noise_table: list[dict[str, Any]]  # the noise scale per AdLoCo run, early and late
    tuning: list[dict[str, Any]] | None  # the tuning record per method (report.tuning)
    about: list[tuple[str, str]]  # what was run, for the first block


def reference_levels(inputs: Inputs) -> dict[str, float]:
    """The perplexities drawn as reference lines: the data's references and the base model."""
    base = inputs.base
    return {**inputs.references.levels, **({"base model": base.val_perplexity} if base else {})}


def workers(inputs: Inputs, roles, gains):
    """The workers × local batch map, with the variance stage's noise scale beside it."""
    b_simple = finite_or_none(inputs.variance.summary.get("b_simple"))
    return workers_map(inputs.runs, roles.diloco, roles.ddp, roles.adloco, gains, b_simple)


def compute_findings(
    inputs: Inputs,
    devices: list[str] | None = None,
    rooflines: list[str] | None = None,
    networks: list[str] | None = None,
) -> Findings:
    """Roles, targets, the regime sweeps, the verdicts and the per-run numbers."""
    runs, settings, config = inputs.runs, inputs.settings, inputs.config
    roles = assign_roles(config.report, {r.run: r.settings for r in runs})
    ladder = build_ladder(runs, roles, settings, inputs.base, inputs.references)
    if ladder.main is None:
        log.warning("%s", ladder.note)
    brought = bring(config.cluster, inputs.calibration_dir, devices, rooflines, networks)
    regimes = compute_regimes(
        runs, roles, ladder, config, inputs.calibration_dir, settings, *brought
    )
    clock, clock_reason = own_clock(config.cluster, regimes.models)
    claims = evaluate_claims(runs, roles, ladder, settings, clock_reason)
    attach_alternatives(claims, runs, roles, ladder, settings, clock_reason)
    context = Context(runs, roles, ladder, settings, clock_reason)
    names = list(dict.fromkeys(r.run for r in runs))
    adloco_runs = [n for n in names if any(r.run == n and r.method == "adloco" for r in runs)]
    base = inputs.base
    gains = gain_shares(runs, roles.ddp, base.val_perplexity if base else None)
    summary = summary_rows(runs, ladder.main, settings.reach_rule)
    seeds = {n: sorted(r.seed for r in runs if r.run == n) for n in names}
    configured = {r.run: {k: getattr(r.settings, k) for k in (*TUNED, *MECHANISM)} for r in runs}
    noise = noise_rows(runs, adloco_runs)
    return Findings(
        roles=roles,
        ladder=ladder,
        regimes=regimes,
        clock=clock,
        clock_reason=clock_reason,
        claims=claims,
        headline=headline_table(context),
        checks=mechanism_checks(runs),
        summary=summary,
        ladder_table=ladder_table(runs, ladder, settings.reach_rule),
        names=names,
        adloco_runs=adloco_runs,
        noise=noise,
        levels=reference_levels(inputs),
        gains=gains,
        workers=workers(inputs, roles, gains),
        spacing=eval_spacing(runs, headline_runs(context), settings.section.max_eval_gap),
        seeds=seeds,
        per_run=per_run_entries(summary),
        merges=[{"run": r.run, "seed": r.seed, **m} for r in runs for m in merges(r.rows)],
        noise_table=noise_summary(noise),
        tuning=tuning_table(inputs.tuning, configured) if inputs.tuning else None,
        about=about_rows(config, inputs.config_path, runs, inputs.references, base, seeds),
    )
