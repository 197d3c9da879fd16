"""Loading: a mapping validated and typed, a section alone, a file; the shipped configurations."""

from __future__ import annotations

import copy

import pytest
import yaml

from adloco.cli import main
from adloco.config import (
    ClusterConfig,
    Config,
    ConfigError,
    config_from_dict,
    load_config,
    section,
    validate,
)
from config_edits import DELETE, ROOT, base, set_key, shipped_configs

SHIPPED = shipped_configs()


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_configs_validate_and_every_run_resolves(name):
    cfg = load_config(ROOT / "config" / name)
    for run in cfg.runs:
        settings = cfg.run(run)
        assert settings.name == run and settings.method in {"adloco", "diloco", "localsgd", "ddp"}


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
    # A merge takes at least two trainers (a count above the trainers left merges them all:
    # tests/config/test_checks.py).
    ("runs.adloco.merge_count", 1, "runs.adloco.merge_count"),
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


def test_validate_fills_in_place_and_config_from_dict_works_on_a_copy():
    raw = base()
    del raw["train"]["inner_steps"]
    typed = config_from_dict(raw)
    assert isinstance(typed, Config) and typed.train.inner_steps == 200
    assert "inner_steps" not in raw["train"]  # the mapping given is left as it was
    assert validate(raw) is raw and raw["train"]["inner_steps"] == 200  # filled in place


def test_a_section_alone_fills_its_defaults_and_refuses_an_unknown_key():
    cluster = section("cluster", {"devices": [{"name": "g", "memory_gib": 8}]})
    assert isinstance(cluster, ClusterConfig)
    assert (cluster.nodes_per_device, cluster.slot_sharing, cluster.processes_per_machine) == (
        1,
        "concurrent",
        1,
    )
    assert cluster.devices[0].speed_tflops == 1.0 and cluster.devices[0].kind == "cpu"
    # The network, absent, is its default ({}) with its own defaults filled in.
    assert (cluster.network.bandwidth_gbit_s, cluster.network.latency_s) == (1.0, 0.001)
    with pytest.raises(ConfigError) as err:
        section("cluster", {"devices": [{"name": "g", "memory_gib": 8}], "nodes": 2})
    assert str(err.value) == (
        "invalid configuration: cluster.nodes: Additional properties are not allowed "
        "('nodes' was unexpected)"
    )
    with pytest.raises(ConfigError, match=r"^invalid configuration: cluster\.devices: "):
        section("cluster", {})


def test_a_file_without_experiment_is_refused_before_validation(tmp_path):
    raw = base()
    del raw["experiment"]
    raw["train"]["inner_lr"] = -1  # would be refused too, later
    path = tmp_path / "variant.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match=r"^.*variant\.yaml: experiment: required"):
        load_config(path)


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
    "tune.yaml": set(),  # the grid is in its runs
    "small-memory.yaml": {"cluster.devices"},  # the one setting the variant is about
    # The model's size, and the network and roofline rate scaled with its bytes and FLOPs.
    "scale-4x.yaml": {
        "model.hidden_size",
        "model.intermediate_size",
        "model.num_hidden_layers",
        "model.num_attention_heads",
        "model.num_key_value_heads",
        "cluster.devices",
        "cluster.network.bandwidth_gbit_s",
    },
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


@pytest.mark.reliability("configs")
def test_a_users_own_config_in_config_is_not_a_shipped_preset(tmp_path, monkeypatch):
    # The README's way to run a variant saves a copy in config/; one with a fault
    # (say, a run named base) must not make the project's suite fail.
    import subprocess

    import config_edits

    repo = tmp_path / "repo"
    (repo / "config").mkdir(parents=True)
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    (repo / "config" / "config.yaml").write_text("experiment: default\n")
    subprocess.run(["git", "add", "config/config.yaml"], cwd=repo, check=True)
    (repo / "config" / "mine.yaml").write_text("experiment: mine\nruns: {base: {}}\n")
    monkeypatch.setattr(config_edits, "ROOT", repo)
    assert config_edits.shipped_configs() == ["config.yaml"]
