"""The typed configuration: one field per schema property, frozen, derived values computed."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from adloco.config import (
    ClusterConfig,
    Config,
    ConfigError,
    config_from_dict,
    load_config,
    load_schema,
    section,
    thaw,
    validate,
)
from adloco.config.types import RunEntry, freeze

ROOT = Path(__file__).resolve().parents[2]


def _schema_node(schema: dict, node: dict) -> dict:
    if "$ref" in node:
        ref = node["$ref"].removeprefix("#/")
        for part in ref.split("/"):
            schema = schema[part]
        return schema
    return node


def _pairs(cls: type, node: dict, schema: dict, where: str):
    """(class, its schema node) for ``cls`` and every section nested in it."""
    yield where, cls, node
    hints = {f.name: f.type for f in dataclasses.fields(cls)}
    for name in hints:
        field_type = cls.__dataclass_fields__[name].type
        for nested in SECTION_CLASSES:
            if nested.__name__ in str(field_type):
                child = _schema_node(schema, node["properties"][name])
                if child.get("type") == "array" or "items" in child:
                    child = child["items"]
                yield from _pairs(nested, child, schema, f"{where}.{name}")


def _section_classes():
    from adloco.config import types

    return [
        obj
        for obj in vars(types).values()
        if isinstance(obj, type)
        and dataclasses.is_dataclass(obj)
        and obj.__name__.endswith("Config")
        and obj is not Config
    ]


SECTION_CLASSES = _section_classes()


@pytest.mark.parametrize("name", list(Config.SECTIONS))
def test_every_section_class_has_exactly_the_schema_properties_in_order(name):
    schema = load_schema()
    hints = {f.name: f.type for f in dataclasses.fields(Config)}
    cls = next(c for c in SECTION_CLASSES if c.__name__ in str(hints[name]))
    checked = 0
    for where, klass, node in _pairs(cls, schema["properties"][name], schema, name):
        fields = [f.name for f in dataclasses.fields(klass)]
        assert fields == list(node["properties"]), where
        # No default of its own: every default is the schema's.
        assert all(f.default is dataclasses.MISSING for f in dataclasses.fields(klass)), where
        checked += 1
    assert checked >= 1


def test_the_top_level_fields_are_the_schema_properties():
    schema = load_schema()
    fields = [f.name for f in dataclasses.fields(Config)]
    assert set(fields) == set(schema["properties"])


def test_a_loaded_config_is_frozen_all_the_way_down():
    cfg = load_config(ROOT / "config" / "test.yaml")
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.cluster.nodes_per_device = 8  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.cluster.devices[0].step_time.scale = 2.0  # type: ignore[misc]
    assert isinstance(cfg.cluster.devices, tuple) and isinstance(cfg.seeds, tuple)
    with pytest.raises(TypeError):
        cfg.runs["x"] = cfg.runs["adloco"]  # type: ignore[index]


def test_thaw_gives_back_the_validated_mapping():
    raw = validate(yaml.safe_load((ROOT / "config" / "config.yaml").read_text()))
    cfg = Config.from_dict(raw)
    for name in Config.SECTIONS:
        assert thaw(getattr(cfg, name)) == raw[name], name
    assert thaw(freeze({"a": [1, (2, 3)], "b": {"c": None}})) == {
        "a": [1, [2, 3]],
        "b": {"c": None},
    }


def _cluster(devices, nodes_per_device):
    return section("cluster", {"nodes_per_device": nodes_per_device, "devices": devices})


def test_cluster_counts_devices_and_slots_from_every_entry():
    cluster = _cluster(
        [
            {"name": "a", "memory_gib": 1.0, "count": 3},
            {"name": "b", "memory_gib": 2.0},
        ],
        nodes_per_device=4,
    )
    assert isinstance(cluster, ClusterConfig)
    assert cluster.device_count() == 3 + 1
    assert cluster.slots() == (3 + 1) * 4
    assert [d.name for d in cluster.per_device()] == ["a", "a", "a", "b"]
    assert cluster.device("b").memory_gib == 2.0
    # Defaults filled by the schema, not by the class.
    assert cluster.device("b").count == 1 and cluster.device("b").step_time.model == "roofline"
    with pytest.raises(ConfigError, match="no device named c"):
        cluster.device("c")


def test_runs_carry_their_seeds_and_where_each_setting_is_written():
    raw = yaml.safe_load((ROOT / "config" / "test.yaml").read_text())
    raw["seeds"] = [3, 4]
    raw["runs"]["adloco"]["seeds"] = [7]
    raw["runs"]["adloco"]["inner_lr"] = 0.002
    cfg = config_from_dict(raw)
    entry = cfg.runs["adloco"]
    assert isinstance(entry, RunEntry)
    assert cfg.run_seeds("adloco") == [7] and cfg.run_seeds("diloco") == [3, 4]
    assert cfg.run("adloco").inner_lr == 0.002
    assert cfg.setting_key("adloco", "inner_lr") == "runs.adloco.inner_lr"
    assert cfg.setting_key("diloco", "inner_lr") == "train.inner_lr"
    assert "seeds" not in entry.written
    assert cfg.train.name == "train" and cfg.train.inner_steps == raw["train"]["inner_steps"]
    with pytest.raises(ConfigError, match=r"runs\.nope: no such run"):
        cfg.run("nope")


def test_a_section_is_checked_against_its_own_schema():
    with pytest.raises(ConfigError, match=r"data\.seq_len_tokens"):
        section("data", {"dataset": "x", "source": "local", "seq_len_tokens": "long"})


def test_the_report_section_is_built_from_its_own_declarations(tmp_path):
    # config/report_section.py declares the section: a file that leaves a field out
    # gets the declared default, and `targets` is built as its own dataclass.
    from adloco.config.fields import SETTING
    from adloco.config.report_section import ReportConfig, TargetsConfig

    default = load_config(ROOT / "config/config.yaml")
    assert isinstance(default.report, ReportConfig)
    assert isinstance(default.report.targets, TargetsConfig)
    assert default.report.targets.main == 0.93  # written in config/config.yaml
    assert default.report.targets.levels == (0.99, 0.97, 0.95, 0.93, 0.9, 0.85, 0.8)
    declared = {f.name: f for f in dataclasses.fields(ReportConfig)}
    raw = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    for key in ("test_level", "confidence"):
        del raw["report"][key]
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(raw))
    config = load_config(tmp_path / "c.yaml")
    assert config.report.test_level == declared["test_level"].metadata[SETTING].default == 0.05
    assert config.report.confidence == declared["confidence"].metadata[SETTING].default == 0.95
