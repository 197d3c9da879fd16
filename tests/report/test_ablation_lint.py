"""Every ablation of every shipped preset changes one mechanism and nothing else.

Claim 3 reads each ablation's verdict as the effect of the component it turns
off (adloco.report.settings.ABLATION_KEYS: the batch test, merging, switch mode,
multi-instance training); an ablation that also changes another setting would
mix two effects. The presets are the files git tracks in config/.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from adloco.config import load_config
from adloco.report.settings import ablation_problem, assign_roles, changed_settings

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
