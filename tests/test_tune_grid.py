"""scripts/tune-grid.py: the tune configuration from its grid declaration, and the widen step."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import yaml

from adloco.report.analysis.tuning import edges

ROOT = Path(__file__).resolve().parents[1]
SPEC = importlib.util.spec_from_file_location("tune_grid", ROOT / "scripts" / "tune-grid.py")
tune_grid = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(tune_grid)

DEFAULT = """\
# The default's head.

experiment: default             # its name
seed: 0                         # base seed
seeds: [0, 1]                   # its seeds

train:
  inner_lr: 0.003               # the inner lr
  outer_lr: 0.7                 # the outer lr
  outer_momentum: 0.0           # plain SGD

# The default's runs.
runs:
  adloco:
    method: adloco              # full AdLoCo
  ddp:
    method: ddp                 # the anchor
    inner_lr: 0.006             # its own lr

report:
  adloco: adloco                # the AdLoCo role
  ddp: null                     # the anchor role
  tuning: config/tuning.json    # the record
  tuning_groups: null           # none here
  tuning_max_climb: null        # no limit

snakemake:
  train_jobs: run               # one job a run
"""

DECLARATION = """\
seeds: [100]                    # the held-out seed
report:
  tuning: null                  # this one writes it
  tuning_max_climb: 1.02        # the climb limit
grids:
  adloco:
    settings: {method: adloco}
    inner_lr: [0.003, 0.0015]   # two lrs
    outer_lr: [0.7]
    outer_momentum: [0, 0.9]
  ddp:
    settings: {method: ddp}
    inner_lr: [0.006]
"""


def tree(tmp_path: Path, declaration: str = DECLARATION) -> Path:
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.yaml").write_text(DEFAULT)
    (tmp_path / "config" / "tune-grid.yaml").write_text(declaration)
    return tmp_path


def test_numbers_in_run_names():
    assert [tune_grid.token(v) for v in (0.0015, 0.003, 0.012, 0.5, 1.0, 1.4, 3.0, 0.00075)] == [
        "15e-4", "3e-3", "12e-3", "5e-1", "1", "14e-1", "3", "75e-5"
    ]  # fmt: skip
    point = {"inner_lr": 0.003, "outer_lr": 1.4, "outer_momentum": 0.95}
    assert tune_grid.run_name("diloco", point, tune_grid.DIMENSIONS) == "diloco-i3e-3-o14e-1-n95"
    assert tune_grid.run_name("ddp", {"inner_lr": 1.0}, ("inner_lr",)) == "ddp-i1"
    # YAML reads every number written back as a float, 1e-05 included.
    assert [yaml.safe_load(tune_grid.number(v)) for v in (1e-05, 1.0, 0.0015)] == [
        1e-05, 1.0, 0.0015
    ]  # fmt: skip


def test_the_tune_configuration_from_a_small_declaration(tmp_path):
    root = tree(tmp_path)
    text = tune_grid.tune_text("config/tune-grid.yaml", root)
    tune = yaml.safe_load(text)
    # 2 inner lrs x 1 outer lr x 2 momenta for adloco, 1 point for ddp, in grid order.
    assert list(tune["runs"]) == [
        "adloco-i15e-4-o7e-1", "adloco-i15e-4-o7e-1-n9", "adloco-i3e-3-o7e-1",
        "adloco-i3e-3-o7e-1-n9", "ddp-i6e-3",
    ]  # fmt: skip
    assert tune["runs"]["adloco-i3e-3-o7e-1-n9"] == {
        "method": "adloco", "inner_lr": 0.003, "outer_lr": 0.7, "outer_momentum": 0.9,
        "nesterov": True,
    }  # fmt: skip
    assert tune["runs"]["adloco-i15e-4-o7e-1"] == {
        "method": "adloco", "inner_lr": 0.0015, "outer_lr": 0.7
    }  # fmt: skip
    assert tune["runs"]["ddp-i6e-3"] == {"method": "ddp", "inner_lr": 0.006}
    report = tune["report"]
    assert report["tuning_groups"] == {
        "adloco": ["adloco-i15e-4-o7e-1", "adloco-i15e-4-o7e-1-n9", "adloco-i3e-3-o7e-1",
                   "adloco-i3e-3-o7e-1-n9"],
        "ddp": ["ddp-i6e-3"],
    }  # fmt: skip
    # Roles on the point the default trains with (adloco: 0.003, 0.7, 0; ddp: 0.006).
    assert (report["adloco"], report["ddp"]) == ("adloco-i3e-3-o7e-1", "ddp-i6e-3")
    assert (report["tuning"], report["tuning_max_climb"]) == (None, 1.02)
    assert (tune["experiment"], tune["seed"], tune["seeds"]) == ("tune", 0, [100])
    # The declaration's comment goes with its key; other sections are the default's text.
    assert "  tuning_max_climb: 1.02        # the climb limit\n" in text
    _, mine = tune_grid.sections(text)
    _, theirs = tune_grid.sections(DEFAULT)
    assert mine["train"] == theirs["train"] and mine["snakemake"] == theirs["snakemake"]
    assert "# The default's runs." not in text


def test_a_report_key_the_default_does_not_list_is_refused(tmp_path):
    root = tree(tmp_path, DECLARATION.replace("  tuning: null", "  tuning_metric: x"))
    with pytest.raises(ValueError, match="report section has no tuning_metric"):
        tune_grid.tune_text("config/tune-grid.yaml", root)


@pytest.mark.parametrize(
    "edit, message",
    [
        (("settings: {method: ddp}", "settings: {method: ddp, inner_lr: 1}"),
         "grids.ddp.settings: inner_lr is searched"),
        (("    inner_lr: [0.006]", "    inner_lr: [0.006]\n    outer_lr: [1.0]"),
         "grids.ddp.outer_lr: method ddp fixes it"),
        (("[0, 0.9]", "[0, 0.99]"), "grids.adloco.outer_momentum: values must lie"),
        (("[0.003, 0.0015]", "[0.003, 0.003]"), "grids.adloco.inner_lr: expected a non-empty"),
        (("seeds: [100]", "seeds: []"), "seeds: expected"),
    ],
)  # fmt: skip
def test_a_faulty_declaration_is_refused_naming_the_key(tmp_path, edit, message):
    root = tree(tmp_path, DECLARATION.replace(*edit))
    with pytest.raises(ValueError, match=message):
        tune_grid.tune_text("config/tune-grid.yaml", root)


def test_a_chosen_point_at_an_edge_widens_the_grid(tmp_path):
    root = tree(tmp_path)
    declared = tune_grid.load_declaration(root / "config" / "tune-grid.yaml")
    groups = tune_grid.grid_runs(declared)
    # The record as tuning_record writes it: adloco chose inner 0.0015 (the lowest),
    # outer 0.7 (the only one) and Nesterov 0.9 (the highest); ddp its only lr.
    record = {"groups": {}}
    for group, chosen in (("adloco", "adloco-i15e-4-o7e-1-n9"), ("ddp", "ddp-i6e-3")):
        points = [
            {"outer_lr": 1.0, "outer_momentum": 0.0, "nesterov": False, **settings}
            for settings in groups[group].values()
        ]
        point = points[list(groups[group]).index(chosen)]
        record["groups"][group] = {"edges": edges(points, point, point["method"])}
    assert record["groups"]["adloco"]["edges"]["inner_lr"]["next"] == [0.00075]
    assert record["groups"]["adloco"]["edges"]["outer_lr"]["next"] == [0.35, 1.4]
    assert record["groups"]["adloco"]["edges"]["outer_momentum"]["next"] == [0.95]
    assert record["groups"]["ddp"]["edges"]["inner_lr"]["next"] == [0.003, 0.012]

    text, added = tune_grid.widen(DECLARATION, record)
    assert added == [
        "adloco.inner_lr: 0.00075", "adloco.outer_lr: 0.35", "adloco.outer_lr: 1.4",
        "adloco.outer_momentum: 0.95", "ddp.inner_lr: 0.003", "ddp.inner_lr: 0.012",
    ]  # fmt: skip
    assert "    inner_lr: [0.00075, 0.0015, 0.003]   # two lrs\n" in text
    (root / "config" / "tune-grid.yaml").write_text(text)
    tune = yaml.safe_load(tune_grid.tune_text("config/tune-grid.yaml", root))
    # 3 x 3 x 3 adloco points and 3 ddp points; the new corners among them.
    assert len(tune["runs"]) == 27 + 3
    assert tune["runs"]["adloco-i75e-5-o35e-2-n95"] == {
        "method": "adloco", "inner_lr": 0.00075, "outer_lr": 0.35, "outer_momentum": 0.95,
        "nesterov": True,
    }  # fmt: skip
    assert tune["report"]["tuning_groups"]["ddp"] == ["ddp-i3e-3", "ddp-i6e-3", "ddp-i12e-3"]
    # A record with nothing to propose leaves the declaration as it is.
    inside = {"groups": {"ddp": {"edges": {"inner_lr": {"next": []}}}}}
    assert tune_grid.widen(text, inside) == (text, [])


def test_the_committed_tune_configuration_is_what_its_declaration_gives():
    assert (ROOT / "config" / "tune.yaml").read_text() == tune_grid.tune_text()


OLD_GRID = """\
grids:
  adloco:
    settings: {method: adloco}
    inner_lr: [0.003, 0.006, 0.012]
    outer_lr: [0.5, 0.7, 1.0]
    outer_momentum: [0, 0.9]
  diloco:
    settings: {method: diloco}
    inner_lr: [0.003, 0.006, 0.012]
    outer_lr: [0.5, 0.7, 1.0]
    outer_momentum: [0, 0.9]
"""


def test_the_committed_record_widens_its_own_grid_and_not_the_declared_one():
    # The previous record chose adloco's inner lr 0.003, the lowest of its grid, and
    # diloco's outer lr 1, the highest (a record without edges: computed from its grid).
    record = yaml.safe_load(
        (ROOT / "tests" / "fixtures" / "tuning-by-final-perplexity.json").read_text()
    )
    text, added = tune_grid.widen(OLD_GRID, record)
    assert added == ["adloco.inner_lr: 0.0015", "diloco.outer_lr: 2.0"]
    assert "    inner_lr: [0.0015, 0.003, 0.006, 0.012]\n" in text
    # The committed declaration searches past both already (0.0015; 1.4): nothing to add.
    declared = (ROOT / "config" / "tune-grid.yaml").read_text()
    assert tune_grid.widen(declared, record) == (declared, [])


def test_the_committed_record_leaves_nothing_to_widen():
    # Round 2 (the lines through round 1's choice, config/tuning-round1.json) brackets every
    # searched dimension of every group, each read along the line through the chosen point.
    record = yaml.safe_load((ROOT / "config" / "tuning.json").read_text())
    assert record["bracketed"] is True
    for group in record["groups"].values():
        for key, edge in group["edges"].items():
            searched, chosen = edge["searched"], edge["chosen"]
            at_end = chosen in (searched[0], searched[-1])
            # At an end only where the range itself ends there (momentum 0, one trainer).
            assert not at_end or key in ("outer_momentum", "initial_trainers"), (key, edge)
    declared = (ROOT / "config" / "tune-grid.yaml").read_text()
    assert tune_grid.widen(declared, record) == (declared, [])


def test_lines_through_the_choice_are_the_center_and_one_change_at_a_time(tmp_path):
    declared = DECLARATION.replace("outer_lr: [0.7]", "outer_lr: [0.35, 0.7]")
    declared += "confirm:\n  within_log: 0.1\n  seeds: [101]\n  runs: [ddp-i6e-3]\n"
    record = {
        "groups": {
            "adloco": {"chosen": {"inner_lr": 0.0015, "outer_lr": 0.7, "outer_momentum": 0.9}},
            "ddp": {"chosen": {"inner_lr": 0.006}},
        }
    }
    text, said = tune_grid.through_choice(declared, record)
    assert said == [
        "adloco at inner_lr: 0.0015, outer_lr: 0.7, outer_momentum: 0.9",
        "ddp at inner_lr: 0.006",
    ]
    assert "    center: {inner_lr: 0.0015, outer_lr: 0.7, outer_momentum: 0.9}" in text
    root = tree(tmp_path, text)
    tune = yaml.safe_load(tune_grid.tune_text("config/tune-grid.yaml", root))
    # The center, then each dimension's other values with the rest held: 1 + 1 + 1 + 1, not
    # the 2 x 2 x 2 of every combination; ddp's one lr is its center alone.
    assert tune["report"]["tuning_groups"]["adloco"] == [
        "adloco-i15e-4-o7e-1-n9", "adloco-i3e-3-o7e-1-n9", "adloco-i15e-4-o35e-2-n9",
        "adloco-i15e-4-o7e-1",
    ]  # fmt: skip
    assert tune["runs"]["ddp-i6e-3"]["seeds"] == [100, 101]  # still on its line: confirmed
    # A confirmed run that is off the lines is dropped from confirm.runs.
    off = declared.replace("runs: [ddp-i6e-3]", "runs: [adloco-i3e-3-o35e-2]")
    assert "  runs: []" in tune_grid.through_choice(off, record)[0]
    # A center must be a point of the grid.
    bad = text.replace("center: {inner_lr: 0.0015,", "center: {inner_lr: 0.002,")
    with pytest.raises(ValueError, match="grids.adloco.center.inner_lr: 0.002 is not among"):
        tune_grid.check_declaration(yaml.safe_load(bad))
    partial = text.replace(", outer_momentum: 0.9}", "}")
    with pytest.raises(ValueError, match="grids.adloco.center: expected a mapping of every"):
        tune_grid.check_declaration(yaml.safe_load(partial))
