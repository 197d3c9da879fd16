"""A run's training settings: ``train``, the rules of its method, and the run's own fields.

:class:`RunSettings` declares every ``train`` setting once, one typed field
each; :func:`train_settings` builds the ``train`` section's settings and
:func:`resolve_run` applies a run's method rules and its own fields to them
with ``dataclasses.replace``, after checking the result against the schema's
``train`` section.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from typing import Any

from adloco.config.fields import BETAS, FRACTION, POSITIVE_INT, declaration, default_first, setting
from adloco.config.schema import ConfigError, fill_and_check, section_schema

# The batch tests a run may name (``train.batch_test``), ``none`` first: the
# registry of adloco.algo.batch_tests implements each, in this order
# (tests/algo/test_batch_tests.py); the configuration names them without importing it.
BATCH_TESTS = ("none", "norm", "augmented_inner_product", "inner_product")

# Rules a method imposes on a run. Presets are filled in when the run leaves
# the field out; a run that sets a conflicting value is rejected.
METHOD_RULES: dict[str, dict[str, Any]] = {
    "diloco": {"initial_trainers": 1, "batch_test": "none", "merge": "none"},
    "localsgd": {
        "initial_trainers": 1,
        "batch_test": "none",
        "merge": "none",
        "inner_optimizer": "sgd",
        "outer_lr": 1.0,
        "outer_momentum": 0.0,
        "nesterov": False,
    },
    # Synchronous data parallel: the gradient of every step is all-reduced and
    # one optimizer (the inner one's settings) steps θ; no outer step.
    "ddp": {
        "initial_trainers": 1,
        "batch_test": "none",
        "merge": "none",
        "outer_lr": 1.0,
        "outer_momentum": 0.0,
        "nesterov": False,
    },
    "adloco": {},
}
# Methods without an outer step: every step's gradient is all-reduced, so the
# model changes at every step (the others change it only at a round's outer step).
PER_STEP_SYNC = frozenset({"ddp"})


@dataclasses.dataclass(frozen=True)
class RunSettings:
    """The resolved training settings of one run (:func:`resolve_run`).

    Each field is one setting of ``train``, declared once here (its schema,
    default and description: :func:`~adloco.config.fields.setting`), plus the
    run's ``name``; the schema's ``$defs/train_fields`` and ``train`` are
    generated from these declarations (:mod:`adloco.config.generate`).
    ``dataclasses.asdict`` gives the merged settings back (``betas`` as a
    tuple), which is what the checkpoint fingerprint hashes.
    """

    name: str
    """the run's key under ``runs`` (``train`` for the train section itself)"""
    method: str = setting(
        "adloco",
        (
            "algorithm family of a run (ddp: synchronous data parallel, the gradient "
            "all-reduced at every step)"
        ),
        type="string",
        enum=default_first("adloco", METHOD_RULES),
    )
    max_rounds: int = setting(20, "outer steps at most", **POSITIVE_INT)
    max_tokens: int = setting(1000000000, "token budget over all trainers", **POSITIVE_INT)
    inner_steps: int = setting(200, "H, inner optimizer steps per round", **POSITIVE_INT)
    inner_optimizer: str = setting("adamw", "inner optimizer", type="string", enum=["adamw", "sgd"])
    inner_lr: float = setting(2e-05, "peak inner learning rate", type="number", exclusiveMinimum=0)
    min_lr_ratio: float = setting(
        0.1, "cosine floor as a share of inner_lr", type="number", minimum=0, maximum=1
    )
    warmup_fraction: float = setting(
        0.0, "share of max_tokens in warmup", type="number", minimum=0, maximum=1
    )
    weight_decay: float = setting(0.1, "inner weight decay", type="number", minimum=0)
    betas: tuple[float, float] = setting([0.9, 0.95], "AdamW betas", **BETAS)
    grad_clip_norm: float | None = setting(
        1.0, "inner gradient clipping norm", type=["number", "null"], exclusiveMinimum=0
    )
    outer_lr: float = setting(0.5, "outer SGD learning rate", type="number", exclusiveMinimum=0)
    outer_momentum: float = setting(
        0.0, "outer SGD momentum", type="number", minimum=0, exclusiveMaximum=1
    )
    nesterov: bool = setting(False, "Nesterov outer momentum", type="boolean")
    initial_trainers: int = setting(1, "trainers at start", **POSITIVE_INT)
    initial_batch: int | str = setting(
        1,
        (
            "local batch per node slot at start (max_batch: the smallest calibrated max batch"
            " of the cluster's devices); a trainer's global batch starts at it times its "
            "slots"
        ),
        oneOf=[{"$ref": "#/$defs/positive_int"}, {"const": "max_batch"}],
    )
    init: str = setting(
        "shared", "initial weights of the trainers", type="string", enum=["shared", "independent"]
    )
    subset_fraction: float = setting(1.0, "share of the train split per trainer", **FRACTION)
    batch_test: str = setting(
        "none", "adaptive batch test", type="string", enum=default_first("none", BATCH_TESTS)
    )
    eta: float = setting(
        0.8, "norm test eta, in (0, 1)", type="number", exclusiveMinimum=0, exclusiveMaximum=1
    )
    vartheta: float = setting(
        0.01, "inner-product test vartheta", type="number", exclusiveMinimum=0
    )
    nu: float = setting(0.3, "orthogonality test nu", type="number", exclusiveMinimum=0)
    stats_microbatches: int = setting(
        4,
        (
            "micro-batches each statistics step of a node slot is split into, each a group of"
            " the batch test (1: the step's own passes)"
        ),
        **POSITIVE_INT,
    )
    stats_reduce: str = setting(
        "scalars",
        (
            "how a trainer's nodes combine the batch-test statistics: scalars (7 float64 "
            "numbers per node, each node's own unbiased estimates; no extra D-vector) or "
            "vector (the pooled gradient sum S all-reduced as float32, D x 4 bytes more per "
            "communication); docs/algorithms.md"
        ),
        type="string",
        enum=["scalars", "vector"],
    )
    stats_steps: int = setting(
        1,
        (
            "consecutive inner steps of a node slot whose micro-batches form one block of "
            "groups taken at one point (1: exact; more: a slot of one sequence per step "
            "yields a variance, biased up by the gradient's change over the block); "
            "adloco.algo.trust"
        ),
        **POSITIVE_INT,
    )
    stats_blocks: str = setting(
        "first",
        (
            "statistics blocks of a round: the first (at the trainer's common point when "
            "stats_steps is 1) or every complete one"
        ),
        type="string",
        enum=["first", "all"],
    )
    stats_decay: float = setting(
        0.0,
        (
            "weight of the previous rounds' running estimate per round, against this round's "
            "degrees of freedom (0: this round's estimate alone)"
        ),
        type="number",
        minimum=0,
        exclusiveMaximum=1,
    )
    stats_min_dof: float = setting(
        0,
        (
            "the batch test acts only on an estimate of at least this many degrees of freedom"
            " (decayed sum over rounds); a negative or zero gradient-norm estimate never "
            "raises the batch"
        ),
        type="number",
        minimum=0,
    )
    max_batch_growth: float = setting(
        4.0, "largest factor of batch growth per round", type="number", minimum=1
    )
    merge: str = setting("none", "merge policy", type="string", enum=["none", "smallest_batch"])
    merge_frequency: int = setting(3, "rounds between merges", **POSITIVE_INT)
    merge_count: int = setting(2, "trainers merged at once", type="integer", minimum=2)
    merge_batch: str = setting(
        "per_node",
        (
            "global batch of a merged trainer: per_node (the reference code's rule): the kept "
            "trainer's batch per node slot over all the merged trainers' slots, so its global "
            "batch grows with its nodes; max (ours): the largest of the merged trainers' "
            "global batches; sum: their sum"
        ),
        type="string",
        enum=["per_node", "max", "sum"],
    )
    lr_scaling: str = setting(
        "sqrt",
        ("peak inner lr times (local batch / lr_reference_batch)^p, p = 0, 1/2 or 1"),
        type="string",
        enum=["none", "sqrt", "linear"],
    )
    lr_reference_batch: int | None = setting(
        None,
        ("local batch at which the inner lr is inner_lr (null: the run's initial local batch)"),
        type=["integer", "null"],
        minimum=1,
    )
    switch: str = setting(
        "switch",
        "switch policy",
        type="string",
        enum=["switch", "always_accumulate", "never_accumulate"],
    )
    switch_lambda: float = setting(
        2.0, "accumulate above lambda * max_batch", type="number", minimum=1
    )
    eval_every_rounds: int = setting(1, "rounds between evaluations", **POSITIVE_INT)
    eval_sequences: int = setting(256, "validation sequences per evaluation", **POSITIVE_INT)
    eval_batch: int = setting(16, "sequences per evaluation batch", **POSITIVE_INT)
    checkpoint_every_rounds: int = setting(1, "rounds between checkpoints", **POSITIVE_INT)
    autocast_dtype: str | None = setting(
        None, "CUDA autocast dtype", type=["string", "null"], enum=["bfloat16", "float16", None]
    )
    pseudo_grad_dtype: str = setting(
        "float32",
        "pseudo-gradient communication dtype",
        type="string",
        enum=["float32", "bfloat16", "float16"],
    )
    nodes_per_device: int | None = setting(
        None,
        (
            "node slots per device for this run alone (null: cluster.nodes_per_device); a run"
            " with a constant batch only (batch_test none, merge none, a numeric "
            "initial_batch): the calibrated max batch is the cluster's slot's (the workers x "
            "local batch map of docs/report.md)"
        ),
        type=["integer", "null"],
        minimum=1,
    )
    slot_execution: str = setting(
        "sequential",
        (
            "how one process runs a trainer's node slots: sequential (one after another on "
            "one model) or vectorized (slots with the same passes stacked: one batched "
            "forward, backward and optimizer update; the rest one after another); the same "
            "trajectory up to float rounding and the same simulated time (docs/engine.md)"
        ),
        type="string",
        enum=["sequential", "vectorized"],
    )

    @classmethod
    def from_dict(cls, settings: Mapping) -> RunSettings:
        """From a validated merged mapping holding every train field and ``name``."""
        return cls(**{k: _typed(v) for k, v in settings.items()})

    def as_mapping(self) -> dict[str, Any]:
        """The settings as the schema checks them (``betas`` a list), ``name`` left out."""
        return {
            f.name: list(v) if isinstance(v := getattr(self, f.name), tuple) else copy.deepcopy(v)
            for f in dataclasses.fields(self)
            if f.name != "name"
        }


def _typed(value: Any) -> Any:
    """A mapping's value as a field holds it: a list (``betas``) as a tuple."""
    return tuple(value) if isinstance(value, list) else value


# Keys of a run that are not training settings.
RUN_ONLY_KEYS = ("seeds",)


def train_settings(train: Mapping) -> RunSettings:
    """The ``train`` section as the settings every run starts from (named ``train``).

    A field left out takes its declared default. Not checked here: the whole
    configuration's check names a bad ``train.<key>``, and :func:`resolve_run`
    checks each run merged from it.
    """
    values = {
        field.name: copy.deepcopy(train[field.name] if field.name in train else decl.default)
        for field in dataclasses.fields(RunSettings)
        if (decl := declaration(field)) is not None
    }
    return RunSettings.from_dict({**values, "name": "train"})


def _check_method(name: str, overrides: Mapping) -> str:
    """The run's method, after refusing an unknown one or a value its rules forbid."""
    method = overrides.get("method")
    if method not in METHOD_RULES:
        raise ConfigError(f"runs.{name}.method: must be one of {sorted(METHOD_RULES)}")
    for key, required in METHOD_RULES[method].items():
        if key in overrides and overrides[key] != required:
            raise ConfigError(
                f"runs.{name}.{key}: method {method} requires {required!r}, got {overrides[key]!r}"
            )
    return method


def resolve_run(config: Mapping, name: str, train: RunSettings | None = None) -> RunSettings:
    """The training settings of run ``name``: train, then its method's rules, then its own fields.

    ``train`` is the train section's settings where the caller built them
    already (:func:`train_settings`); the run's changes are applied to it with
    ``dataclasses.replace`` once the merged settings pass the schema's ``train``,
    with messages naming ``runs.<name>.<key>``.
    """
    if name not in config["runs"]:
        known = ", ".join(sorted(config["runs"]))
        raise ConfigError(f"runs.{name}: no such run (known: {known})")
    overrides = config["runs"][name]
    method = _check_method(name, overrides)
    if train is None:
        train = train_settings(config.get("train", {}))
    changes = {
        **copy.deepcopy(METHOD_RULES[method]),
        **{k: copy.deepcopy(v) for k, v in overrides.items() if k not in RUN_ONLY_KEYS},
    }
    # The merged run is checked whole, as written: an unknown key or a bad value of
    # train or of the run is named under the run; e-notation text becomes its number.
    start = train.as_mapping()
    written = {**start, **copy.deepcopy(dict(config.get("train", {}))), **changes}
    merged = fill_and_check(written, section_schema("train"), prefix=f"runs.{name}")
    updates = {k: _typed(v) for k, v in merged.items() if k in changes or v != start[k]}
    return dataclasses.replace(train, name=name, **updates)
