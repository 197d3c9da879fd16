"""Malformed configuration files: each refused at load, before any job, naming its key.

Every case is a copy of the test preset (``config/test.yaml``) with one fault:
a value of the wrong type at every key of the file, an unknown key in every
section, and the faults users met (a run name DVC reads as a key path, no
``experiment``, a key written twice, a report role naming no run, a model no
device holds, ...). Each must be refused by :func:`adloco.config.load_config`
(what every ``adloco`` command and the Snakemake workflow read), naming the
key, and by the Snakemake profiles' check in one line.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from adloco.config import ConfigError, load_config
from adloco_workflow.snakemake_preflight import check_configfiles
from config_edits import DELETE
from config_edits import set_key as set_dotted

PRESET = Path(__file__).parents[1] / "config" / "test.yaml"
BASE = yaml.safe_load(PRESET.read_text())


def leaves(node, prefix: str = ""):
    """(dotted key, value) of every scalar or list in ``node``, devices by index."""
    for key, value in node.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            yield from leaves(value, f"{path}.")
        elif isinstance(value, list) and value and isinstance(value[0], dict):
            for index, item in enumerate(value):
                yield from leaves(item, f"{path}.{index}.")
        else:
            yield path, value


def sections(node, prefix: str = ""):
    """The dotted key of every mapping in ``node`` (the top level is "")."""
    yield prefix.rstrip(".")
    for key, value in node.items():
        if isinstance(value, dict) and key != "runs":
            yield from sections(value, f"{prefix}{key}.")
        elif isinstance(value, list) and value and isinstance(value[0], dict):
            yield from sections(value[0], f"{prefix}{key}.0.")


def wrong_type(value):
    if isinstance(value, bool):
        return "maybe"
    if isinstance(value, (int, float)):
        return "many"
    if isinstance(value, str):
        return 12
    if isinstance(value, list):
        return "a list"
    return None


def set_key(config: dict, key: str | tuple[str, ...], value) -> dict:
    """Set (or DELETE) ``key``: dotted, or a tuple of parts (a run name with a dot)."""
    if isinstance(key, str):
        return set_dotted(config, key, value)
    *parents, leaf = key
    for part in parents:
        config = config[part]
    config[leaf] = value
    return config


# (case, how the file is changed, the key the message must name)
CASES: list[tuple[str, object, str]] = []
for key, value in leaves(BASE):
    if wrong_type(value) is not None:
        CASES.append((f"{key} wrong type", (key, wrong_type(value)), key))
for section in sections(BASE):
    key = f"{section}.colour" if section else "colour"
    CASES.append((f"{key} unknown", (key, "blue"), key))

# The faults users met, and their neighbours.
CASES += [
    (
        "run name with a dot",
        (("runs", "adloco-eta-0.8"), {"method": "adloco"}),
        "runs.adloco-eta-0.8",
    ),
    ("run name with a slash", ("runs.a/b", {"method": "adloco"}), "runs.a/b"),
    ("run name with a space", ("runs.a b", {"method": "adloco"}), "runs.a b"),
    ("run name starting with -", ("runs.-x", {"method": "adloco"}), "runs.-x"),
    ("no experiment", ("experiment", DELETE), "experiment"),
    ("experiment ..", ("experiment", ".."), "experiment"),
    ("dataset ..", ("data.dataset", ".."), "data.dataset"),
    ("device named ..", ("cluster.devices.0.name", ".."), "cluster.devices.0.name"),
    ("report.adloco names no run", ("report.adloco", "adloco-typo"), "report.adloco"),
    ("report.diloco names no run", ("report.diloco", "dilco"), "report.diloco"),
    ("report.baselines names no run", ("report.baselines", ["localsgd"]), "report.baselines"),
    ("report.ablations names no run", ("report.ablations", ["no-merge"]), "report.ablations"),
    ("report.ddp names no run", ("report.ddp", "dp"), "report.ddp"),
    (
        "report.targets.derived_runs names no run",
        ("report.targets", {"relative_to": "derived", "derived_runs": ["x"]}),
        "report.targets.derived_runs",
    ),
    ("a model no device holds", ("model.hidden_size", 1_000_000), "model"),
    ("a model too deep", ("model.num_hidden_layers", 100_000), "model"),
    ("hidden size not a multiple of heads", ("model.hidden_size", 33), "model.hidden_size"),
    ("no runs", ("runs", {}), "runs"),
    ("run without method", ("runs.adloco.method", DELETE), "runs.adloco"),
    ("unknown method", ("runs.adloco.method", "fedavg"), "runs.adloco.method"),
    ("diloco with two trainers", ("runs.diloco.initial_trainers", 2), "runs.diloco"),
    ("more trainers than slots", ("runs.adloco.initial_trainers", 5), "runs.adloco"),
    ("a merge of one trainer", ("runs.adloco.merge_count", 1), "runs.adloco.merge_count"),
    ("more processes than devices", ("cluster.processes_per_machine", 3), "cluster"),
    (
        "two devices of one name",
        # Two copies: one object twice would be written as a YAML alias, which is refused.
        ("cluster.devices", [copy.deepcopy(BASE["cluster"]["devices"][0]) for _ in range(2)]),
        "cluster.devices.1.name",
    ),
    (
        "hub without max_documents",
        [("data.source", "hub"), ("data.max_documents", None)],
        "data.max_documents",
    ),
    ("pretrained tokenizer without name", ("data.tokenizer.kind", "pretrained"), "data.tokenizer"),
    ("pretrained model without name", ("model.source", "pretrained"), "model.name"),
    ("negative learning rate", ("train.inner_lr", -0.1), "train.inner_lr"),
    ("zero inner steps", ("train.inner_steps", 0), "train.inner_steps"),
    ("NaN learning rate", ("train.inner_lr", float("nan")), "train.inner_lr"),
    ("infinite bandwidth", ("cluster.network.bandwidth_gbit_s", float("inf")), "cluster.network"),
    ("no seeds", ("seeds", []), "seeds"),
    ("repeated seeds", ("seeds", [0, 0]), "seeds"),
]

# Faults in the text of the file rather than in its values.
TEXT_CASES = [
    ("key written twice", lambda t: t.replace("seed: 0 ", "seed: 0\nseed: 1 ", 1), "line"),
    (
        "nested key written twice",
        lambda t: t.replace("  inner_steps: 2 ", "  inner_steps: 2\n  inner_steps: 3 ", 1),
        "'inner_steps' is written twice",
    ),
    ("YAML syntax error", lambda t: t.replace("seeds: [0]", "seeds: [0"), "line"),
    ("not a mapping", lambda t: "- a list\n", "mapping"),
    (
        "nested too deeply",
        lambda t: "experiment: deep\ndata: " + "[" * 200_000 + "]" * 200_000 + "\n",
        "nests too deeply to read as YAML; start again from a copy of config/config.yaml",
    ),
]


def refused(path: Path, key: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert key in str(err.value), str(err.value)
    with pytest.raises(SystemExit) as stop:
        check_configfiles(["--configfile", str(path)])
    message = str(stop.value)
    assert message.startswith(f"snakemake: error: {path}") and "\n" not in message, message
    assert key in message, message


@pytest.mark.reliability("configs")
@pytest.mark.parametrize(("case", "change", "key"), CASES, ids=[c[0] for c in CASES])
def test_a_malformed_config_is_refused_naming_the_key(tmp_path, case, change, key):
    config = copy.deepcopy(BASE)
    for changed, value in change if isinstance(change, list) else [change]:
        set_key(config, changed, value)
    path = tmp_path / "variant.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    refused(path, key)


@pytest.mark.heavy
@pytest.mark.reliability("configs")
@pytest.mark.parametrize(("case", "edit", "named"), TEXT_CASES, ids=[c[0] for c in TEXT_CASES])
def test_a_malformed_config_file_is_refused_naming_the_line(tmp_path, case, edit, named):
    path = tmp_path / "variant.yaml"
    path.write_text(edit(PRESET.read_text()))
    refused(path, named)


def test_a_key_written_twice_names_both_lines(tmp_path):
    path = tmp_path / "variant.yaml"
    text = PRESET.read_text()
    first = next(i for i, line in enumerate(text.splitlines()) if line.startswith("seed:"))
    path.write_text(text.replace("seed: 0 ", "seed: 0\nseed: 1 ", 1))
    with pytest.raises(ConfigError) as err:
        load_config(path)
    message = str(err.value)
    assert message.startswith(f"{path}: not valid YAML: line {first + 2}, column 1: ")
    assert f"key 'seed' is written twice, on lines {first + 1} and {first + 2}" in message


def test_the_cases_cover_every_key_of_the_preset():
    keys = {key for key, _ in leaves(BASE)}
    covered = {
        c[0] for _, change, _ in CASES for c in (change if isinstance(change, list) else [change])
    }
    assert keys - {k for k, v in leaves(BASE) if v is None} <= covered
    assert len(CASES) + len(TEXT_CASES) >= 100


INFINITE = (
    "is not a finite number (YAML reads .inf, or a number beyond the largest number a float "
    "holds (1.8e+308), as infinity); write a finite number"
)


@pytest.mark.reliability("configs")
@pytest.mark.parametrize(
    ("written", "message"),
    [
        # 1e400 is beyond a float (YAML 1.2 reads it as infinity): refused as infinite.
        ("1e400", f"train.inner_lr: inf {INFINITE}"),
        ("1.0e+400", f"train.inner_lr: inf {INFINITE}"),
        ("-.inf", f"train.inner_lr: -inf {INFINITE}"),
        (".nan", "train.inner_lr: nan is not a finite number; write a finite number"),
    ],
)
def test_a_number_no_float_holds_is_refused_as_such(tmp_path, written, message):
    path = tmp_path / "variant.yaml"
    path.write_text(PRESET.read_text().replace("  inner_lr: 0.003 ", f"  inner_lr: {written} ", 1))
    refused(path, message)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert "1.0e+400," not in str(err.value)
