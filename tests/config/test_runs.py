"""A run's settings: train, then its method's rules, then its own fields, validated and typed."""

from __future__ import annotations

import dataclasses

import pytest

from adloco.config import (
    METHOD_RULES,
    Config,
    ConfigError,
    RunSettings,
    config_from_dict,
    load_schema,
    resolve_run,
    train_settings,
    validate,
)
from config_edits import base


def test_run_settings_fields_are_the_schema_train_fields():
    schema = load_schema()
    names = [f.name for f in dataclasses.fields(RunSettings)]
    assert names == ["name", *schema["$defs"]["train_fields"]]
    assert set(schema["properties"]["train"]["properties"]) == set(names) - {"name"}


def test_run_settings_are_frozen_and_give_back_the_merged_dict():
    cfg = validate(base())
    run = Config.from_dict(cfg).run("adloco")
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.inner_lr = 1.0  # type: ignore[misc]
    merged = {**cfg["train"], **cfg["runs"]["adloco"], "name": "adloco"}
    as_dict = dataclasses.asdict(run)
    assert as_dict == {**merged, "betas": tuple(merged["betas"])}


def test_run_overrides_train_and_method_rules_apply():
    cfg = config_from_dict(base())
    run = cfg.run("adloco")
    assert run.batch_test == "norm" and run.initial_trainers == 2
    assert run.inner_steps == cfg.train.inner_steps
    cfg2 = base()
    cfg2["runs"]["local"] = {"method": "localsgd"}
    local = config_from_dict(cfg2).run("local")
    assert (local.inner_optimizer, local.outer_lr, local.outer_momentum) == (
        "sgd",
        1.0,
        0.0,
    )


def test_a_run_may_have_its_own_seeds():
    cfg = base()
    cfg["seeds"] = [0, 1, 2, 3]
    cfg["runs"]["adloco"]["seeds"] = [0, 1]
    typed = config_from_dict(cfg)
    assert typed.run_seeds("adloco") == [0, 1]
    assert typed.run_seeds("diloco") == [0, 1, 2, 3]
    # Seeds are not a training setting: the resolved run has none.
    assert not hasattr(typed.run("adloco"), "seeds")
    cfg["runs"]["adloco"]["seeds"] = [1, 1]
    with pytest.raises(ConfigError, match=r"runs\.adloco\.seeds"):
        validate(cfg)


# A mapping written by hand (not validated: resolve_run checks the merged run alone).
MAPPING = {
    "train": {"inner_lr": 0.01, "outer_lr": 0.5, "inner_steps": 10, "nesterov": True},
    "runs": {
        "local": {"method": "localsgd", "inner_steps": 5, "seeds": [9]},
        "ada": {"method": "adloco", "outer_lr": 0.25},
    },
}


def test_train_then_method_rules_then_run_fields():
    defaults = {
        k: v["default"] for k, v in load_schema()["properties"]["train"]["properties"].items()
    }
    local = resolve_run(MAPPING, "local")
    assert local.name == "local" and local.method == "localsgd"
    assert local.inner_lr == 0.01  # train
    assert local.inner_steps == 5  # the run over train
    # The method's rules over train (outer_lr 0.5, nesterov true), and filled where train is silent.
    rules = METHOD_RULES["localsgd"]
    assert (local.outer_lr, local.nesterov, local.inner_optimizer) == (1.0, False, "sgd")
    assert {k: getattr(local, k) for k in rules} == rules
    # Everything else is the schema's default for train.
    assert local.max_rounds == defaults["max_rounds"] and local.eta == defaults["eta"]
    ada = resolve_run(MAPPING, "ada")  # adloco has no rules: train, then the run
    assert (ada.inner_lr, ada.outer_lr, ada.inner_steps, ada.nesterov) == (0.01, 0.25, 10, True)
    assert ada.initial_trainers == defaults["initial_trainers"]
    assert MAPPING["train"] == {
        "inner_lr": 0.01,
        "outer_lr": 0.5,
        "inner_steps": 10,
        "nesterov": True,
    }


@pytest.mark.parametrize(
    ("method", "key", "value"),
    [("localsgd", "outer_lr", 0.7), ("diloco", "initial_trainers", 2), ("ddp", "nesterov", True)],
)
def test_a_run_field_contradicting_its_method_is_refused_naming_it(method, key, value):
    mapping = {"train": {}, "runs": {"r1": {"method": method, key: value}}}
    with pytest.raises(ConfigError) as err:
        resolve_run(mapping, "r1")
    required = METHOD_RULES[method][key]
    assert str(err.value) == f"runs.r1.{key}: method {method} requires {required!r}, got {value!r}"
    # The value the rule requires, written in the run, is no contradiction.
    mapping["runs"]["r1"][key] = required
    assert getattr(resolve_run(mapping, "r1"), key) == required


def test_an_unknown_run_or_method_and_a_bad_merged_value_are_named():
    with pytest.raises(ConfigError) as err:
        resolve_run(MAPPING, "nope")
    assert str(err.value) == "runs.nope: no such run (known: ada, local)"
    mapping = {"train": {}, "runs": {"r": {"method": "fedavg"}}}
    with pytest.raises(ConfigError) as err:
        resolve_run(mapping, "r")
    assert str(err.value) == "runs.r.method: must be one of ['adloco', 'ddp', 'diloco', 'localsgd']"
    # A bad value inherited from train is reported under the run that merged it.
    mapping = {"train": {"inner_steps": 0}, "runs": {"r": {"method": "adloco"}}}
    with pytest.raises(
        ConfigError, match=r"^invalid configuration: runs\.r\.inner_steps: 0 is less"
    ):
        resolve_run(mapping, "r")


def test_train_is_built_once_and_each_run_is_a_replace_of_it():
    train = train_settings(MAPPING["train"])
    assert train.name == "train" and (train.inner_lr, train.inner_steps) == (0.01, 10)
    assert train.max_rounds == 20 and train.betas == (0.9, 0.95)  # declared defaults
    # Given the train settings, a run starts from them, not from the mapping's train.
    given = dataclasses.replace(train, max_rounds=7)
    local = resolve_run(MAPPING, "local", given)
    assert local.max_rounds == 7
    rules = METHOD_RULES["localsgd"]
    expected = dataclasses.replace(given, name="local", method="localsgd", inner_steps=5, **rules)
    assert local == expected
    assert resolve_run(MAPPING, "local") == dataclasses.replace(local, max_rounds=20)


def test_a_run_is_checked_merged_and_its_e_notation_read_as_a_number():
    mapping = {
        "train": {"inner_lr": "2e-4"},
        "runs": {"r": {"method": "adloco", "outer_lr": "5e-1", "betas": [0.8, 0.9]}},
    }
    run = resolve_run(mapping, "r")
    assert (run.inner_lr, run.outer_lr, run.betas) == (0.0002, 0.5, (0.8, 0.9))
    mapping["runs"]["r"]["colour"] = "red"
    with pytest.raises(ConfigError) as err:
        resolve_run(mapping, "r")
    assert str(err.value) == (
        "invalid configuration: runs.r.colour: Additional properties are not allowed "
        "('colour' was unexpected)"
    )
    mapping = {"train": {"colour": "red"}, "runs": {"r": {"method": "adloco"}}}
    with pytest.raises(ConfigError, match=r"^invalid configuration: runs\.r\.colour: Additional"):
        resolve_run(mapping, "r")
