"""Configuration: defaults, run resolution, and malformed configs rejected with the key named."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import pytest
import yaml

from adloco import paths
from adloco.cli import main
from adloco.config import Config, ConfigError, config_from_dict, load_config, validate

ROOT = Path(__file__).resolve().parents[1]


def base() -> dict:
    return yaml.safe_load((ROOT / "config" / "test.yaml").read_text())


SHIPPED = sorted(p.name for p in (ROOT / "config").glob("*.yaml"))


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_configs_validate_and_every_run_resolves(name):
    cfg = load_config(ROOT / "config" / name)
    for run in cfg.runs:
        settings = cfg.run(run)
        assert settings.name == run and settings.method in {"adloco", "diloco", "localsgd", "ddp"}


def test_run_settings_fields_are_the_schema_train_fields():
    from adloco.config import RunSettings, load_schema

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


def test_defaults_come_from_the_schema():
    cfg = base()
    del cfg["train"]["inner_steps"]
    del cfg["calibration"]
    cfg = validate(cfg)
    assert cfg["train"]["inner_steps"] == 200  # the schema's default, the paper's H
    assert cfg["calibration"]["margin"] == 0.9


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


def set_key(cfg: dict, dotted: str, value) -> dict:
    *parents, leaf = dotted.split(".")
    node = cfg
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if value is DELETE:
        del node[leaf]
    else:
        node[leaf] = value
    return cfg


DELETE = object()

MALFORMED = [
    ("data.seq_len_tokens", "128", "data.seq_len_tokens"),
    ("data.source", "s3", "data.source"),
    ("data.validation_fraction", 1.5, "data.validation_fraction"),
    ("data.tokenizer.kind", "wordpiece", "data.tokenizer.kind"),
    ("model.hidden_size", 0, "model.hidden_size"),
    ("cluster.devices", [], "cluster.devices"),
    ("cluster.devices.0.memory_gib", -1, "cluster.devices.0.memory_gib"),
    ("cluster.devices.0.kind", "tpu", "cluster.devices.0.kind"),
    ("train.outer_momentum", 1.0, "train.outer_momentum"),
    ("train.betas", [0.9], "train.betas"),
    ("train.switch", "sometimes", "train.switch"),
    ("train.lerning_rate", 0.1, "train.lerning_rate"),
    ("runs.adloco.batch_test", "variance", "runs.adloco.batch_test"),
    ("runs.adloco.initial_trainers", 99, "runs.adloco.initial_trainers"),
    ("runs.diloco.initial_trainers", 2, "runs.diloco.initial_trainers"),
    ("runs.adloco.method", "fedavg", "runs.adloco.method"),
    ("seeds", [1, 1], "seeds"),
    ("model.num_key_value_heads", 3, "model.num_key_value_heads"),
    ("data", DELETE, "data"),
    # The norm test's η lies in (0, 1), in train, in a run and in the variance stage.
    ("train.eta", 1.0, "train.eta"),
    ("train.eta", 0.0, "train.eta"),
    ("runs.adloco.eta", 1.5, "runs.adloco.eta"),
    ("variance.eta", 1.0, "variance.eta"),
    # Merging needs at least merge_count trainers.
    ("runs.adloco.merge_count", 3, "runs.adloco.merge_count"),
    # Not a number: NaN and infinities, wherever they are.
    ("train.inner_lr", float("nan"), "train.inner_lr"),
    ("cluster.network.bandwidth_gbit_s", float("inf"), "cluster.network.bandwidth_gbit_s"),
    ("cluster.devices.0.speed_tflops", float("inf"), "cluster.devices.0.speed_tflops"),
    ("runs.adloco.outer_lr", float("nan"), "runs.adloco.outer_lr"),
    ("report.target_perplexity", float("inf"), "report.target_perplexity"),
]


@pytest.mark.parametrize(("key", "value", "named"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_config_is_rejected_with_the_key(key, value, named):
    cfg = set_key(copy.deepcopy(base()), key, value)
    with pytest.raises(ConfigError) as err:
        validate(cfg)
    assert named in str(err.value)


def test_cli_rejects_a_bad_config_before_writing_anything(tmp_path, capsys):
    cfg = set_key(base(), "train.inner_lr", -1)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(cfg))
    out = tmp_path / "out"
    code = main(
        [
            "train",
            "--config",
            str(path),
            "--run",
            "adloco",
            "--seed",
            "0",
            "--data",
            str(tmp_path),
            "--calibration",
            str(tmp_path),
            "--out",
            str(out),
            "--checkpoints",
            str(tmp_path / "ck"),
        ]
    )
    assert code == 2
    assert "train.inner_lr" in capsys.readouterr().err
    assert not out.exists() and not (tmp_path / "ck").exists()


def test_not_yaml_and_missing_file_are_clear(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("train: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "missing.yaml")


def test_merge_count_is_checked_only_when_merging(tmp_path):
    cfg = base()
    cfg["train"]["merge_count"] = 5  # diloco (one trainer, merge none) inherits it
    cfg["runs"]["adloco"]["merge_count"] = 2
    validate(cfg)
    cfg["train"]["merge_count"] = 3
    del cfg["runs"]["adloco"]["merge_count"]
    with pytest.raises(ConfigError, match=r"train\.merge_count: .*3 trainers.*runs\.adloco"):
        validate(cfg)


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


@pytest.mark.parametrize(
    ("run", "named"),
    [
        ({"stats_microbatches": 1, "stats_steps": 1}, "one group per statistics block"),
        ({"stats_reduce": "vector", "stats_steps": 2}, "stats_steps 1 and stats_blocks first"),
        ({"stats_reduce": "vector", "stats_blocks": "all"}, "stats_steps 1 and stats_blocks first"),
    ],
)
def test_statistics_blocks_the_test_cannot_read_are_refused(run, named):
    cfg = base()
    cfg["runs"]["adloco"].update(run)
    with pytest.raises(ConfigError, match=named):
        validate(cfg)
    # A run without a batch test may have them.
    cfg["runs"]["adloco"]["batch_test"] = "none"
    validate(cfg)


def test_two_devices_with_one_name_are_refused():
    cfg = base()
    device = cfg["cluster"]["devices"][0]
    cfg["cluster"]["devices"] = [device, {**device, "count": 1}]
    with pytest.raises(ConfigError, match=r"cluster\.devices\.1\.name: 'cpu-tiny' is also") as err:
        validate(cfg)
    # The file the name would collide on, where adloco.paths puts it.
    assert str(paths.calibration_file(cfg["experiment"], "<name>")) in str(err.value)


@pytest.mark.parametrize(
    ("line", "named"),
    [
        ("  inner_lr: .nan ", "train.inner_lr: nan is not a finite number"),
        ("  inner_lr: -.inf ", "train.inner_lr: -inf is not a finite number"),
        ("  betas: [0.9, .inf]\n  inner_lr: 0.003 ", "train.betas.1: inf is not a finite number"),
    ],
)
def test_yaml_nan_and_infinity_are_refused(tmp_path, line, named):
    path = tmp_path / "c.yaml"
    text = (ROOT / "config" / "test.yaml").read_text()
    path.write_text(text.replace("  inner_lr: 0.003 ", line))
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert named in str(err.value)


@pytest.mark.parametrize(
    ("written", "hint"), [("1e-4", "1.0e-4"), ("3E5", "3.0e+5"), ("2.5e3", "2.5e+3")]
)
def test_a_number_yaml_reads_as_a_string_gets_a_hint(tmp_path, written, hint):
    path = tmp_path / "c.yaml"
    text = (ROOT / "config" / "test.yaml").read_text()
    path.write_text(text.replace("  inner_lr: 0.003 ", f"  inner_lr: {written} "))
    with pytest.raises(ConfigError) as err:
        load_config(path)
    message = str(err.value)
    assert f"train.inner_lr: '{written}' is not of type 'number'" in message
    assert f"write {hint}" in message


def test_a_yaml_syntax_error_names_the_file_line_and_column(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("seed: 0\ndata:\n  dataset: x\n   source: local\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    message = str(err.value)
    assert message.startswith(f"{path}: not valid YAML: line 4, column ")
    assert "\n" not in message


def test_a_subset_leaving_a_trainer_less_than_a_batch_is_refused_naming_the_key():
    from adloco.config import check_subset_fraction

    raw = base()
    cfg = config_from_dict(raw)
    run = cfg.run("adloco")  # 2 trainers on 4 slots, initial_batch 2: batches of 4
    check_subset_fraction(cfg, run, train_sequences=40, initial_local_batch=2)  # 40 x 0.1 = 4
    run = dataclasses.replace(run, subset_fraction=0.05)
    with pytest.raises(ConfigError) as err:
        check_subset_fraction(cfg, run, train_sequences=40, initial_local_batch=2)
    message = str(err.value)
    assert message.startswith("train.subset_fraction: 0.05 of the 40 train sequences")
    assert "2 sequences per trainer" in message and "batch of 4" in message
    raw["runs"]["adloco"]["subset_fraction"] = 0.05
    with pytest.raises(ConfigError, match=r"^runs\.adloco\.subset_fraction"):
        check_subset_fraction(config_from_dict(raw), run, train_sequences=40, initial_local_batch=2)


def _leaves(node: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in node.items():
        if isinstance(value, dict):
            out.update(_leaves(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


# Variants of the default: what each may change besides its name, seeds, runs and report.
VARIANTS = {
    # The evaluation, as when config/tuning.json was measured.
    "tune.yaml": {"train.eval_sequences", "train.eval_batch"},
    "small-memory.yaml": {"cluster.devices"},  # the one setting the variant is about
}


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_variants_differ_from_the_default_only_where_they_say(name):
    default = _leaves(yaml.safe_load((ROOT / "config/config.yaml").read_text()))
    variant = _leaves(yaml.safe_load((ROOT / "config" / name).read_text()))
    own = ("experiment", "seeds", "runs.", "report.")
    differ = {
        k
        for k in default.keys() | variant.keys()
        if default.get(k, "<absent>") != variant.get(k, "<absent>") and not k.startswith(own)
    }
    assert differ == VARIANTS[name]
