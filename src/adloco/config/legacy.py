"""The configuration as a validated dict, for the modules not yet on :class:`Config`.

Transitional: every reader moves to :func:`adloco.config.load_config` (typed),
and this module goes once none is left.
"""

from __future__ import annotations

from pathlib import Path

from adloco.config.loading import section, validate
from adloco.config.yaml_file import check_experiment_named, read_yaml


def load_config_dict(path: str | Path) -> dict:
    """Read, default-fill and validate a configuration file; the checked dict."""
    raw = read_yaml(path)
    check_experiment_named(raw, path)
    return validate(raw)


def setting_key(config: dict, name: str, field: str) -> str:
    """Where a run's setting is written: in the run, else in ``train`` (for messages)."""
    return f"runs.{name}.{field}" if field in config["runs"][name] else f"train.{field}"


def total_slots(config: dict) -> int:
    """Node slots of the cluster: devices x nodes_per_device."""
    cluster = config["cluster"]
    return sum(d.get("count", 1) for d in cluster["devices"]) * cluster.get("nodes_per_device", 1)


def run_seeds(config: dict, name: str) -> list[int]:
    """The training seeds of run ``name``: its own ``seeds``, else the top-level ones."""
    return list(config["runs"][name].get("seeds", config["seeds"]))


def model_config(model: dict):
    """The typed ``model`` section of a dict one (a resolved base's ``base`` checksum dropped)."""
    return section("model", {k: v for k, v in model.items() if k != "base"})


def cluster_config(cluster: dict):
    """The typed ``cluster`` section of a dict one."""
    return section("cluster", cluster)


def device_config(device: dict):
    """The typed entry of ``cluster.devices`` of a dict one."""
    return cluster_config({"devices": [device]}).devices[0]
