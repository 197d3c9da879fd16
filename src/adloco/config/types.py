"""The typed configuration: one frozen dataclass per section of the schema.

:func:`adloco.config.load_config` validates a file against the schema, which
fills every default, and builds a :class:`Config` from the filled mapping. No
dataclass here has a default of its own: each default is written once, in the
schema (``src/adloco/schemas/config.schema.yaml``), and a test keeps the field
names of every class equal to the properties of its section. Lists become
tuples and mappings read-only, so that a configuration cannot change after it
was checked. Derived values (the cluster's node slots, a device by name) are
methods, next to the fields they come from.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any

from adloco.config.runs import RUN_ONLY_KEYS, RunSettings, resolve_run
from adloco.config.schema import ConfigError


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
class TokenizerConfig:
    """``data.tokenizer``."""

    kind: str
    """bpe (trained on the train split) or pretrained (loaded by name)"""
    name: str | None
    """Hugging Face name or local folder of a pretrained tokenizer"""
    vocab_size: int
    """vocabulary of a trained BPE"""


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """``data``: the corpus, its splits and its tokenization."""

    dataset: str
    source: str
    raw_dir: str
    hub_path: str
    hub_name: str
    max_documents: int | None
    validation_fraction: float
    base_fraction: float
    seq_len_tokens: int
    num_proc: int
    on_bad_record: str
    tokenizer: TokenizerConfig


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """``model``: a Llama built from these sizes, a pretrained name, or the base."""

    source: str
    name: str | None
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    tie_word_embeddings: bool
    dtype: str


@dataclasses.dataclass(frozen=True)
class PretrainConfig:
    """``pretrain``: the base model's own loop (plain AdamW, cosine schedule)."""

    max_tokens: int
    batch_size: int
    lr: float
    min_lr_ratio: float
    warmup_fraction: float
    weight_decay: float
    betas: tuple[float, float]
    grad_clip_norm: float | None
    eval_every_steps: int
    checkpoint_every_steps: int


@dataclasses.dataclass(frozen=True)
class StepTimeConfig:
    """``cluster.devices[].step_time``: how a device's step time is modelled."""

    model: str
    saturation_batch: int
    update_s: float
    scale: float


@dataclasses.dataclass(frozen=True)
class DeviceConfig:
    """One entry of ``cluster.devices``: ``count`` identical devices."""

    name: str
    count: int
    kind: str
    memory_gib: float
    speed_tflops: float
    max_batch: int | None
    gpu_model: str | None
    step_time: StepTimeConfig


@dataclasses.dataclass(frozen=True)
class NetworkConfig:
    """``cluster.network``: the link between node slots."""

    bandwidth_gbit_s: float
    latency_s: float


@dataclasses.dataclass(frozen=True)
class ClusterConfig:
    """``cluster``: the devices, their node slots and the network."""

    nodes_per_device: int
    slot_sharing: str
    processes_per_machine: int
    devices: tuple[DeviceConfig, ...]
    network: NetworkConfig

    def device_count(self) -> int:
        """Devices of the cluster, every entry's ``count`` summed."""
        return sum(d.count for d in self.devices)

    def for_run(self, run: RunSettings) -> ClusterConfig:
        """The cluster a run trains on: its own nodes_per_device where it sets one."""
        if run.nodes_per_device is None:
            return self
        return dataclasses.replace(self, nodes_per_device=run.nodes_per_device)

    def slots(self) -> int:
        """Node slots of the cluster: devices x nodes_per_device."""
        return self.device_count() * self.nodes_per_device

    def device(self, name: str) -> DeviceConfig:
        """The entry of ``devices`` called ``name``."""
        for device in self.devices:
            if device.name == name:
                return device
        known = ", ".join(d.name for d in self.devices)
        raise ConfigError(f"cluster.devices: no device named {name} (devices: {known})")

    def per_device(self) -> list[DeviceConfig]:
        """One entry per device (an entry of count n n times), in order."""
        return [device for device in self.devices for _ in range(device.count)]


@dataclasses.dataclass(frozen=True)
class CalibrationConfig:
    """``calibration``: the max-batch search and the step timing."""

    margin: float
    steps_per_trial: int
    max_batch_limit: int
    dtype: str
    timing_repeats: int
    timing_warmup: int


@dataclasses.dataclass(frozen=True)
class VarianceConfig:
    """``variance``: the gradient-variance analysis of the start model."""

    num_batches: int
    batch_size: int
    eval_sequences: int
    eta: float


@dataclasses.dataclass(frozen=True)
class TargetsConfig:
    """``report.targets``: the perplexity targets of the verdicts."""

    relative_to: str
    levels: tuple[float, ...]
    main: float | None
    derived_levels: int
    derived_runs: tuple[str, ...] | None


@dataclasses.dataclass(frozen=True)
class ReportConfig:
    """``report``: the runs' roles, the targets and the rules of the verdicts."""

    adloco: str | None
    diloco: str | None
    ddp: str | None
    baselines: tuple[str, ...] | None
    ablations: tuple[str, ...] | None
    targets: TargetsConfig
    reached: str
    between: str
    pairing: str
    paired_test: str
    equal_time: str
    test_level: float
    confidence: float
    tuning: str | None
    tuning_groups: Mapping[str, tuple[str, ...]] | None
    tuning_max_climb: float | None
    bandwidths_gbit_s: tuple[float, ...] | None
    saturation_batches: tuple[int, ...] | None


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

    experiment: str
    seed: int
    seeds: tuple[int, ...]
    data: DataConfig
    model: ModelConfig
    pretrain: PretrainConfig | None
    cluster: ClusterConfig
    calibration: CalibrationConfig
    variance: VarianceConfig
    train: RunSettings
    """``train``: the settings every run starts from (named ``train``)"""
    runs: Mapping[str, RunEntry]
    report: ReportConfig

    SECTIONS: typing.ClassVar[tuple[str, ...]] = (
        "data",
        "model",
        "pretrain",
        "cluster",
        "calibration",
        "variance",
        "report",
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
        runs = {
            name: RunEntry(
                settings=resolve_run(mapping, name),
                seeds=tuple(fields.get("seeds", top_seeds)),
                written=frozenset(k for k in fields if k not in RUN_ONLY_KEYS),
            )
            for name, fields in mapping["runs"].items()
        }
        return cls(
            experiment=mapping["experiment"],
            seed=mapping["seed"],
            seeds=top_seeds,
            train=RunSettings.from_dict({**mapping["train"], "name": "train"}),
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
