"""Loading a configuration: validate a mapping, type it, read a file.

:func:`validate` checks a mapping against the schema (which fills every
default) and every rule between fields; :func:`load_config` reads a file
through it and returns the frozen :class:`~adloco.config.types.Config`.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from adloco.config.checks import check_config
from adloco.config.schema import check_run_names, fill_and_check, load_schema, section_schema
from adloco.config.types import (
    CalibrationConfig,
    ClusterConfig,
    Config,
    DataConfig,
    ModelConfig,
    PretrainConfig,
    ReportConfig,
    VarianceConfig,
    build,
)
from adloco.config.yaml_file import check_experiment_named, read_yaml


def validate(config: dict) -> dict:
    """Fill defaults into the mapping ``config`` in place, check everything; return it.

    The schema first, then every rule between fields on the typed form, so a
    mapping that passes builds a :class:`Config` (:func:`config_from_dict`).
    """
    # Before the schema, whose message for a bad name would not say why.
    check_run_names(config)
    fill_and_check(config, load_schema())
    check_config(Config.from_dict(config))
    return config


def config_from_dict(mapping: Mapping) -> Config:
    """The typed configuration of a mapping: a copy validated and default-filled."""
    return Config.from_dict(validate(copy.deepcopy(dict(mapping))))


SECTION_TYPES = {
    "data": DataConfig,
    "model": ModelConfig,
    "pretrain": PretrainConfig,
    "cluster": ClusterConfig,
    "calibration": CalibrationConfig,
    "variance": VarianceConfig,
    "report": ReportConfig,
}


def section(name: str, mapping: Mapping) -> Any:
    """One typed section (``data``, ``cluster``, ...) from a mapping of it alone: a copy
    default-filled and checked against that section's schema (for tests and tools that
    need one section, not a whole configuration)."""
    filled = fill_and_check(copy.deepcopy(dict(mapping)), section_schema(name), prefix=name)
    return build(SECTION_TYPES[name], filled)


def load_config(path: str | Path) -> Config:
    """Read, default-fill, validate and type a configuration file."""
    raw = read_yaml(path)
    check_experiment_named(raw, path)
    return Config.from_dict(validate(raw))
