"""The report's settings (report/settings.py): the roles of the runs, detected from the default
config's run names or set in report:, and every preset's ablations, one change each."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from adloco.config import ConfigError, RunSettings, config_from_dict, load_config, section
from adloco.report.settings import (
    DEFAULT_BANDWIDTHS_GBIT_S,
    ReachRule,
    ReportSettings,
    ablation_problem,
    assign_roles,
    changed_settings,
)

BASE_CONFIG = {
    "data": {"dataset": "t", "source": "local"},
    "model": {},
    "cluster": {"nodes_per_device": 2, "devices": [{"name": "cpu-t", "count": 2, "memory_gib": 1}]},
    "train": {},
}
FULL = {
    "method": "adloco",
    "initial_trainers": 2,
    "batch_test": "norm",
    "merge": "smallest_batch",
    "switch": "switch",
}


def resolved(runs: dict[str, dict]) -> dict[str, RunSettings]:
    """Each run's overrides resolved against the report tests' base config."""
    config = config_from_dict({**copy.deepcopy(BASE_CONFIG), "runs": copy.deepcopy(runs)})
    return {name: config.run(name) for name in runs}


DEFAULT_RUNS = resolved(
    {
        "diloco": {"method": "diloco"},
        "diloco-max-batch": {"method": "diloco"},
        "diloco-matched-comms": {"method": "diloco"},
        "localsgd": {"method": "localsgd"},
        "adloco": FULL,
        "adloco-eta-0_8": {**FULL, "eta": 0.8},
        "adloco-no-adaptive": {**FULL, "batch_test": "none"},
        "adloco-no-merge": {**FULL, "merge": "none"},
        "adloco-no-switch": {**FULL, "switch": "never_accumulate"},
    }
)


def test_roles_of_the_default_runs_are_detected():
    roles = assign_roles(section("report", {}), DEFAULT_RUNS)
    assert roles.adloco == "adloco" and roles.diloco == "diloco"
    assert roles.baselines == ["diloco-max-batch", "diloco-matched-comms", "localsgd"]
    assert roles.ablations == ["adloco-no-adaptive", "adloco-no-merge", "adloco-no-switch"]
    assert roles.variants == ["adloco-eta-0_8"]  # differs in eta only: not an ablation
    assert roles.ablation_labels["adloco-no-merge"] == "merge=none"
    assert roles.role_of("adloco-eta-0_8") == "AdLoCo variant"


def test_paper_preset_names():
    runs = {
        "adloco": FULL,
        "diloco": {"method": "diloco"},
        "localsgd": {"method": "localsgd"},
        "adloco-no-switch-always": {**FULL, "switch": "always_accumulate"},
        "adloco-no-switch-never": {**FULL, "switch": "never_accumulate"},
    }
    roles = assign_roles(section("report", {}), resolved(runs))
    assert roles.ablations == ["adloco-no-switch-always", "adloco-no-switch-never"]
    assert roles.baselines == ["localsgd"]


def test_explicit_roles_win_and_are_checked():
    explicit = {
        "adloco": "adloco-eta-0_8",
        "diloco": "diloco-max-batch",
        "baselines": ["localsgd"],
        "ablations": ["adloco-no-merge"],
    }
    roles = assign_roles(section("report", explicit), DEFAULT_RUNS)
    assert (roles.adloco, roles.diloco) == ("adloco-eta-0_8", "diloco-max-batch")
    assert roles.baselines == ["localsgd"] and roles.ablations == ["adloco-no-merge"]
    assert "adloco" in roles.variants and roles.sources["adloco"] == "report.adloco"
    with pytest.raises(ConfigError, match="report.diloco: no run named 'nope'"):
        assign_roles(section("report", {"diloco": "nope"}), DEFAULT_RUNS)
    with pytest.raises(ConfigError, match="report.adloco: run 'diloco' is of method diloco"):
        assign_roles(section("report", {"adloco": "diloco"}), DEFAULT_RUNS)


def test_settings_defaults():
    s = ReportSettings.from_section(section("report", {}))
    assert (s.section.targets.relative_to, s.levels, s.main) == ("base", (0.95, 0.9, 0.85), None)
    assert s.bandwidths_gbit_s == DEFAULT_BANDWIDTHS_GBIT_S and s.saturation_batches is None
    assert s.rules() == {
        "reached": "stays", "between": "model", "merged": "at_merge",
        "communications": "messages", "pairing": "seed", "paired_test": "signed_rank",
        "equal_time": "fastest",
    }  # fmt: skip
    assert s.reach_rule == ReachRule("stays", "model", "at_merge", "messages")
    report = s.section
    assert (report.test_level, report.confidence, report.tuning, report.tuning_groups) == (
        0.05,
        0.95,
        None,
        None,
    )


def test_settings_sort_the_levels_bandwidths_and_saturations():
    # Levels hardest last, duplicates dropped; bandwidths and saturation batches ascending.
    report = section(
        "report",
        {
            "targets": {"relative_to": "absolute", "levels": [50, 80, 50, 60], "main": 60},
            "bandwidths_gbit_s": [10, 0.1, 1],
            "saturation_batches": [8, 2, 8, 4],
            "tuning_groups": {"adloco": ["adloco-lr1", "adloco-lr2"]},
        },
    )
    s = ReportSettings.from_section(report)
    assert s.levels == (80.0, 60.0, 50.0) and s.main == 60.0
    assert all(isinstance(v, float) for v in (*s.levels, s.main))  # 50 written, 50.0 read
    assert s.bandwidths_gbit_s == (0.1, 1.0, 10.0)
    assert s.saturation_batches == (2, 4, 8)
    assert dict(s.section.tuning_groups) == {"adloco": ("adloco-lr1", "adloco-lr2")}
    # A rule changed is the same type with another section; the rest unchanged.
    other = s.with_rule("pairing", "none")
    assert other.rules()["pairing"] == "none" and s.rules()["pairing"] == "seed"
    assert (other.levels, other.bandwidths_gbit_s) == (s.levels, s.bandwidths_gbit_s)


def test_the_three_configs_validate_their_report_section():
    from pathlib import Path

    from adloco.config import load_config

    for name in ("config.yaml", "paper.yaml", "test.yaml"):
        config = load_config(Path(__file__).parents[2] / "config" / name)
        ReportSettings.from_section(config.report)


# Every ablation of every shipped preset changes one mechanism and nothing else.
#
# Claim 3 reads each ablation's verdict as the effect of the component it turns
# off (adloco.report.settings.ABLATION_KEYS: the batch test, merging, switch mode,
# multi-instance training); an ablation that also changes another setting would
# mix two effects. The presets are the files git tracks in config/.
ROOT = Path(__file__).resolve().parents[2]
PRESETS = sorted(p for p in (ROOT / "config").glob("*.yaml") if p.name != "tune-grid.yaml")


def _settings(config):
    return {name: config.run(name) for name in config.runs}


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: p.name)
def test_each_ablation_turns_off_one_component_and_changes_nothing_else(preset):
    config = load_config(preset)
    settings = _settings(config)
    roles = assign_roles(config.report, settings)
    for ablation in roles.ablations:
        problem = ablation_problem(settings[ablation], settings[roles.adloco])
        assert problem == "", f"{preset.name}: runs.{ablation} {problem}"


def test_the_defaults_ablations_each_change_one_setting_of_the_tuned_run():
    config = load_config(ROOT / "config" / "config.yaml")
    settings = _settings(config)
    roles = assign_roles(config.report, settings)
    full = settings[roles.adloco]
    changed = {a: changed_settings(settings[a], full) for a in roles.ablations}
    # The tuned adloco runs one trainer: merging and multi-instance training are not its
    # to ablate (adloco-paper, the paper's configuration, answers claim 1 beside it).
    assert changed == {"adloco-no-adaptive": ["batch_test"]}
    assert roles.paper == "adloco-paper" and "adloco-paper" not in roles.ablations


def test_the_lint_names_what_an_ablation_also_changes():
    config = load_config(ROOT / "config" / "config.yaml")
    full = config.run("adloco")
    two = full.__class__(**{**vars(full), "batch_test": "none", "merge_batch": "sum"})
    assert ablation_problem(two, full) == "turns off batch_test and also changes merge_batch"
    both = full.__class__(**{**vars(full), "batch_test": "none", "merge": "none"})
    assert ablation_problem(both, full) == "turns off 2 components (batch_test, merge), not one"
    assert ablation_problem(full, full) == "turns off 0 components (none), not one"
