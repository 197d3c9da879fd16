"""The typed configuration: :class:`Config`, gathering one frozen dataclass per section.

:func:`adloco.config.load_config` validates a file against the schema, which
fills every default, and builds a :class:`Config` from the filled mapping.
Each setting is declared once, on its dataclass field
(:func:`~adloco.config.fields.setting`: its schema, default and description);
the sections live in :mod:`~adloco.config.sections`,
:mod:`~adloco.config.cluster` and :mod:`~adloco.config.report_section`, the
``train`` settings in :class:`~adloco.config.runs.RunSettings`, and the schema
file (``src/adloco/schemas/config.schema.yaml``) is generated from them
(:mod:`adloco.config.generate`). No dataclass has a Python default: a field is
filled from the validated mapping. Lists become tuples and mappings read-only,
so that a configuration cannot change after it was checked. Derived values
(the cluster's node slots, a device by name) are methods, next to the fields
they come from.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any

from adloco.config.cluster import ClusterConfig, DeviceConfig, NetworkConfig, StepTimeConfig
from adloco.config.fields import OPTIONAL, REQUIRED, setting
from adloco.config.report_section import ReportConfig, TargetsConfig
from adloco.config.runs import RUN_ONLY_KEYS, RunSettings, resolve_run, train_settings
from adloco.config.schema import RUN_NAME, ConfigError
from adloco.config.sections import (
    CalibrationConfig,
    DataConfig,
    ModelConfig,
    PretrainConfig,
    TokenizerConfig,
    VarianceConfig,
)
from adloco.config.snakemake_section import SnakemakeConfig

# The sections, gathered here for the modules that import them from types.
__all__ = [
    "CalibrationConfig",
    "ClusterConfig",
    "Config",
    "DataConfig",
    "DeviceConfig",
    "ModelConfig",
    "NetworkConfig",
    "PretrainConfig",
    "ReportConfig",
    "RunEntry",
    "SnakemakeConfig",
    "StepTimeConfig",
    "TargetsConfig",
    "TokenizerConfig",
    "VarianceConfig",
    "build",
    "freeze",
    "thaw",
]


def freeze(value: Any) -> Any:
    """Lists as tuples and dicts as read-only mappings, all the way down."""
    if isinstance(value, list | tuple):
        return tuple(freeze(v) for v in value)
    if isinstance(value, Mapping):
        return types.MappingProxyType({k: freeze(v) for k, v in value.items()})
    return value


def thaw(value: Any) -> Any:
    """The plain JSON-like value of a frozen one (tuples as lists, mappings as dicts)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: thaw(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, list | tuple):
        return [thaw(v) for v in value]
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    return value


def _dataclass_of(hint: Any) -> type | None:
    """The dataclass a field holds (itself, optional, or a tuple of it), else None."""
    if dataclasses.is_dataclass(hint):
        return hint
    for arg in typing.get_args(hint):
        if arg is not type(None) and arg is not Ellipsis and dataclasses.is_dataclass(arg):
            return arg
    return None


def build(cls: type, mapping: Mapping) -> Any:
    """``cls`` from a validated, default-filled mapping of exactly its fields.

    A nested section (a field whose type is a dataclass, optional or a tuple
    of it) is built the same way; every other value is frozen.
    """
    hints = typing.get_type_hints(cls)
    values = {}
    for field in dataclasses.fields(cls):
        value = mapping[field.name]
        inner = _dataclass_of(hints[field.name])
        if inner is not None and isinstance(value, list | tuple):
            value = tuple(build(inner, v) for v in value)
        elif inner is not None and value is not None:
            value = build(inner, value)
        else:
            value = freeze(value)
        values[field.name] = value
    return cls(**values)


@dataclasses.dataclass(frozen=True)
class RunEntry:
    """One entry of ``runs``: its resolved settings, its seeds, and the keys it writes itself."""

    settings: RunSettings
    seeds: tuple[int, ...]
    written: frozenset[str]
    """the fields the run sets (the others come from ``train`` or its method's rules)"""


@dataclasses.dataclass(frozen=True)
class Config:
    """A whole configuration, validated and default-filled (:func:`adloco.config.load_config`)."""

    experiment: str = setting(
        "default",
        (
            "name of this configuration's results folder, results/<experiment>/ (calibration,"
            " variance, runs, checkpoints, report)"
        ),
        type="string",
        pattern="^[A-Za-z0-9][A-Za-z0-9._-]*$",
    )
    seed: int = setting(0, "base seed", type="integer", minimum=0)
    seeds: tuple[int, ...] = setting(
        [0],
        "training seeds run for every entry of runs",
        type="array",
        items={"type": "integer", "minimum": 0},
        minItems=1,
        uniqueItems=True,
    )
    data: DataConfig = setting(REQUIRED)
    model: ModelConfig = setting(REQUIRED)
    pretrain: PretrainConfig | None = setting(
        OPTIONAL,
        ("the base model's plain AdamW loop (adloco pretrain), used when model.source is base"),
    )
    cluster: ClusterConfig = setting(REQUIRED)
    calibration: CalibrationConfig = setting({})
    variance: VarianceConfig = setting({})
    train: RunSettings = setting(
        REQUIRED, "the settings every run starts from, each run's fields over them"
    )
    runs: Mapping[str, RunEntry] = setting(
        REQUIRED,
        "named runs; each overrides train",
        # Every other key of a run is a field of train: resolve_run checks the
        # merged run against train's schema, naming the run and the key.
        type="object",
        minProperties=1,
        propertyNames={"pattern": f"^{RUN_NAME.pattern}$"},
        additionalProperties={
            "type": "object",
            "required": ["method"],
            "properties": {
                "seeds": {
                    "type": "array",
                    "items": {"type": "integer", "minimum": 0},
                    "minItems": 1,
                    "uniqueItems": True,
                    "description": "this run's training seeds (default: the top-level seeds)",
                }
            },
        },
    )
    report: ReportConfig = setting(
        {},
        "what adloco report compares, and the stated rules its verdicts rest on (docs/report.md)",
    )
    snakemake: SnakemakeConfig = setting(
        {}, "how the Snakemake workflow cuts the training into jobs (no result depends on it)"
    )

    SECTIONS: typing.ClassVar[tuple[str, ...]] = (
        "data",
        "model",
        "pretrain",
        "cluster",
        "calibration",
        "variance",
        "report",
        "snakemake",
    )

    @classmethod
    def from_dict(cls, mapping: Mapping) -> Config:
        """From a mapping the schema has validated and filled (:func:`adloco.config.validate`)."""
        hints = typing.get_type_hints(cls)
        sections = {
            name: build(_dataclass_of(hints[name]), mapping[name])
            if mapping.get(name) is not None
            else None
            for name in cls.SECTIONS
        }
        top_seeds = tuple(mapping["seeds"])
        train = train_settings(mapping["train"])
        runs = {
            name: RunEntry(
                settings=resolve_run(mapping, name, train),
                seeds=tuple(fields.get("seeds", top_seeds)),
                written=frozenset(k for k in fields if k not in RUN_ONLY_KEYS),
            )
            for name, fields in mapping["runs"].items()
        }
        return cls(
            experiment=mapping["experiment"],
            seed=mapping["seed"],
            seeds=top_seeds,
            train=train,
            runs=types.MappingProxyType(runs),
            **sections,
        )

    def run(self, name: str) -> RunSettings:
        """The resolved settings of run ``name``."""
        if name not in self.runs:
            known = ", ".join(sorted(self.runs))
            raise ConfigError(f"runs.{name}: no such run (known: {known})")
        return self.runs[name].settings

    def run_seeds(self, name: str) -> list[int]:
        """The training seeds of run ``name``: its own ``seeds``, else the top-level ones."""
        self.run(name)
        return list(self.runs[name].seeds)

    def setting_key(self, name: str, field: str) -> str:
        """Where a run's setting is written: in the run, else in ``train`` (for messages)."""
        return f"runs.{name}.{field}" if field in self.runs[name].written else f"train.{field}"
