"""Configuration: load a YAML file, fill defaults from the JSON schema, validate, type.

Every CLI command goes through :func:`load_config`, so a bad value fails
before any job starts, with the key and the reason; it returns a frozen
:class:`Config`. The Snakemake workflow, whose configuration is a dict by
nature, calls :func:`validate` on that dict (the same checks) and reads it.

- :mod:`~adloco.config.loading`: :func:`validate`, :func:`load_config`;
- :mod:`~adloco.config.schema`: the schema, its defaults and its messages;
- :mod:`~adloco.config.yaml_file`: reading the file;
- :mod:`~adloco.config.fields`: :func:`~adloco.config.fields.setting`, how each
  setting declares its schema, default and description on its dataclass field;
- :mod:`~adloco.config.generate`: the schema file, generated from those declarations;
- :mod:`~adloco.config.runs`: a run's settings (``train`` + method + run);
- :mod:`~adloco.config.types`: :class:`Config`, gathering the typed sections of
  :mod:`~adloco.config.sections`, :mod:`~adloco.config.cluster` and
  :mod:`~adloco.config.report_section`;
- :mod:`~adloco.config.checks`: rules between fields.
"""

from __future__ import annotations

from adloco.config.checks import REPORT_ROLES, check_dvc_raw_dir, check_subset_fraction
from adloco.config.loading import config_from_dict, load_config, section, validate
from adloco.config.runs import (
    METHOD_RULES,
    RUN_ONLY_KEYS,
    RunSettings,
    resolve_run,
    train_settings,
)
from adloco.config.schema import (
    RUN_NAME,
    ConfigError,
    check_finite,
    load_schema,
    schema_path,
)
from adloco.config.types import (
    CalibrationConfig,
    ClusterConfig,
    Config,
    DataConfig,
    DeviceConfig,
    ModelConfig,
    NetworkConfig,
    PretrainConfig,
    ReportConfig,
    StepTimeConfig,
    TargetsConfig,
    TokenizerConfig,
    VarianceConfig,
    thaw,
)
from adloco.config.yaml_file import check_experiment_named, read_yaml

__all__ = [
    "METHOD_RULES",
    "REPORT_ROLES",
    "RUN_NAME",
    "RUN_ONLY_KEYS",
    "CalibrationConfig",
    "ClusterConfig",
    "Config",
    "ConfigError",
    "DataConfig",
    "DeviceConfig",
    "ModelConfig",
    "NetworkConfig",
    "PretrainConfig",
    "ReportConfig",
    "RunSettings",
    "StepTimeConfig",
    "TargetsConfig",
    "TokenizerConfig",
    "VarianceConfig",
    "check_experiment_named",
    "check_dvc_raw_dir",
    "check_finite",
    "check_subset_fraction",
    "config_from_dict",
    "load_config",
    "load_schema",
    "read_yaml",
    "resolve_run",
    "schema_path",
    "section",
    "thaw",
    "train_settings",
    "validate",
]
