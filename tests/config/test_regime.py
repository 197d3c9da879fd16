"""The default configuration sits in the regime docs/regime.md states: checked on the shipped files.

The runs continue the base (a warmup-stable base, each run at the base's lr
at the base's batch), take their settings from the tuning record, aim at the
main target the record suggests, and the workers map's runs split ddp's
global batch.
"""

from __future__ import annotations

import json

import pytest

from adloco.algo import schedule
from adloco.config import load_config
from adloco.report.analysis.tuning import TUNED
from adloco.report.settings import assign_roles, changed_settings
from config_edits import ROOT

CONFIG = load_config(ROOT / "config" / "config.yaml")
RECORD = json.loads((ROOT / "config" / "tuning.json").read_text())


def test_the_base_warms_up_then_holds_its_lr():
    p = CONFIG.pretrain
    warm = p.warmup_fraction * p.max_tokens
    at = (0, warm / 2, warm, p.max_tokens / 2, p.max_tokens - 1, p.max_tokens)
    lr = [schedule.inner_lr(t, p.max_tokens, p.lr, p.warmup_fraction, p.min_lr_ratio) for t in at]
    assert lr == pytest.approx([0.0, p.lr / 2, p.lr, p.lr, p.lr, p.lr])


def test_ddp_steps_at_its_tuned_lr_at_the_bases_batch():
    ddp = CONFIG.run("ddp")
    assert ddp.lr_reference_batch == CONFIG.pretrain.batch_size
    batch = CONFIG.cluster.for_run(ddp).slots() * ddp.initial_batch  # one step's batch
    assert batch == CONFIG.pretrain.batch_size
    scale = schedule.lr_scale(batch, ddp.lr_reference_batch, ddp.lr_scaling)
    warm = ddp.warmup_fraction * ddp.max_tokens
    # At the end of its warmup (and before its decay) ddp steps at the tuned lr, which
    # is at most the base's stable lr: it continues the base without climbing above it.
    peak = scale * schedule.inner_lr(warm, ddp.max_tokens, ddp.inner_lr, ddp.warmup_fraction,
                                     ddp.min_lr_ratio)  # fmt: skip
    assert peak == pytest.approx(RECORD["groups"]["ddp"]["chosen"]["inner_lr"])
    assert peak <= CONFIG.pretrain.lr
    assert ddp.warmup_fraction <= 0.05  # a short warmup of fresh optimizer states


@pytest.mark.parametrize("group", sorted(RECORD["groups"]))
def test_each_tuned_run_trains_with_the_records_choice(group):
    chosen = RECORD["groups"][group]["chosen"]
    steps = {k: chosen[k] for k in TUNED}
    run = CONFIG.run(group)
    assert {k: getattr(run, k) for k in TUNED} == pytest.approx(steps)
    # AdLoCo's own settings where the grid searched them (initial trainers, eta, merge rule).
    assert {k: getattr(run, k) for k in chosen if k not in TUNED} == {
        k: v for k, v in chosen.items() if k not in TUNED
    }
    # Runs of the same method that keep its steps (variants, ablations, the paper's
    # configuration); a run tuned on its own (diloco-max-batch) has its own group; the
    # map's runs (their own node slots) hold ddp's effective lr instead (the test below).
    for name, entry in CONFIG.runs.items():
        s = entry.settings
        if group == s.method and name not in RECORD["groups"] and s.nodes_per_device is None:
            assert {k: getattr(s, k) for k in TUNED} == pytest.approx(steps), name


def effective_peak_lr(name: str) -> float:
    """A run's peak inner lr after its lr rule at its first step's local batch."""
    s = CONFIG.run(name)
    return s.inner_lr * schedule.lr_scale(s.initial_batch, s.lr_reference_batch, s.lr_scaling)


def test_the_workers_maps_runs_hold_ddps_effective_lr_and_diloco_outer_step():
    own = [n for n, e in CONFIG.runs.items() if e.settings.nodes_per_device is not None]
    ddp = CONFIG.run("ddp")
    ddp_batch = CONFIG.cluster.for_run(ddp).slots() * ddp.initial_batch
    ddp_lr = ddp.inner_lr * schedule.lr_scale(ddp_batch, ddp.lr_reference_batch, ddp.lr_scaling)
    diloco = CONFIG.run("diloco")
    for name in own:
        s = CONFIG.run(name)
        assert effective_peak_lr(name) == pytest.approx(ddp_lr), name
        assert (s.outer_lr, s.outer_momentum, s.nesterov) == (
            diloco.outer_lr,
            diloco.outer_momentum,
            diloco.nesterov,
        ), name
        assert len(CONFIG.run_seeds(name)) >= 2, name


def test_the_main_target_is_the_records_suggestion_and_every_level_is_below_the_base():
    targets = CONFIG.report.targets
    assert targets.relative_to == "base"
    assert targets.main == RECORD["main_target"]["level"]
    assert all(0 < level < 1 for level in targets.levels)
    assert RECORD["max_climb"] == 1.02
    assert all(g["within_max_climb"] for g in RECORD["groups"].values())


def test_the_workers_maps_runs_share_ddps_global_batch_and_are_no_baselines():
    ddp = CONFIG.run("ddp")
    global_batch = CONFIG.cluster.for_run(ddp).slots() * ddp.initial_batch
    own = [n for n, e in CONFIG.runs.items() if e.settings.nodes_per_device is not None]
    assert len(own) >= 2
    splits = set()
    for name in [*own, "diloco"]:
        s = CONFIG.run(name)
        workers = CONFIG.cluster.for_run(s).slots()
        assert workers * s.initial_batch == global_batch, name
        splits.add((workers, s.initial_batch))
    assert (1, global_batch) in splits and (global_batch, 1) in splits
    roles = assign_roles(CONFIG.report, {n: e.settings for n, e in CONFIG.runs.items()})
    assert not set(own) & set(roles.baselines) and roles.baselines


def test_the_steps_to_the_papers_configuration_change_one_setting_each():
    """Claim 1's path (report.analysis.claims.path_runs): each step from the tuned adloco
    sets some of the settings the paper's run differs in, as the paper's run sets them."""
    roles = assign_roles(CONFIG.report, {n: e.settings for n, e in CONFIG.runs.items()})
    tuned, paper = CONFIG.run(roles.adloco), CONFIG.run(roles.paper)
    apart = set(changed_settings(paper, tuned))
    assert {"initial_trainers", "eta"} <= apart
    step = CONFIG.run("adloco-4-trainers")
    assert changed_settings(step, tuned) == ["initial_trainers"]
    assert step.initial_trainers == paper.initial_trainers
    assert "adloco-4-trainers" in roles.variants
