"""A run's training settings: ``train``, the rules of its method, and the run's own fields.

:func:`resolve_run` merges the three and checks the result against the
schema's ``train`` section; :class:`RunSettings` holds it, one typed field per
setting.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from typing import Any

from adloco.config.schema import ConfigError, fill_and_check, section_schema

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


@dataclasses.dataclass(frozen=True)
class RunSettings:
    """The resolved training settings of one run (:func:`resolve_run`).

    One field per property of the schema's ``$defs/train_fields`` (a test
    keeps the two equal), plus the run's ``name``. Built from the validated
    merged dict; ``dataclasses.asdict`` gives that dict back (``betas`` as a
    tuple), which is what the checkpoint fingerprint hashes.
    """

    name: str
    """the run's key under ``runs``"""
    method: str
    """algorithm family of a run"""
    max_rounds: int
    """outer steps at most"""
    max_tokens: int
    """token budget over all trainers"""
    inner_steps: int
    """H, inner optimizer steps per round"""
    inner_optimizer: str
    """inner optimizer"""
    inner_lr: float
    """peak inner learning rate"""
    min_lr_ratio: float
    """cosine floor as a share of inner_lr"""
    warmup_fraction: float
    """share of max_tokens in warmup"""
    weight_decay: float
    """inner weight decay"""
    betas: tuple[float, float]
    """AdamW betas"""
    grad_clip_norm: float | None
    """inner gradient clipping norm"""
    outer_lr: float
    """outer SGD learning rate"""
    outer_momentum: float
    """outer SGD momentum"""
    nesterov: bool
    """Nesterov outer momentum"""
    initial_trainers: int
    """trainers at start"""
    initial_batch: int | str
    """local batch per node slot at start (max_batch: the smallest calibrated max batch
    of the cluster's devices); a trainer's global batch starts at it times its slots"""
    init: str
    """initial weights of the trainers"""
    subset_fraction: float
    """share of the train split per trainer"""
    batch_test: str
    """adaptive batch test"""
    eta: float
    """norm test eta, in (0, 1)"""
    vartheta: float
    """inner-product test vartheta"""
    nu: float
    """orthogonality test nu"""
    stats_microbatches: int
    """micro-batches per node for the statistics"""
    stats_reduce: str
    """how a trainer's nodes combine the batch-test statistics: scalars (7 float64
    numbers per node, each node's own unbiased estimates; no extra D-vector) or vector
    (the pooled gradient sum S all-reduced as float32, D x 4 bytes more per
    communication); docs/algorithms.md"""
    stats_steps: int
    """consecutive inner steps of a node slot whose micro-batches form one block of groups
    taken at one point"""
    stats_blocks: str
    """statistics blocks of a round: the first or every complete one"""
    stats_decay: float
    """weight of the previous rounds' running estimate per round (0: this round alone)"""
    stats_min_dof: float
    """degrees of freedom the batch test needs before it acts"""
    max_batch_growth: float
    """largest factor of batch growth per round"""
    merge: str
    """merge policy"""
    merge_frequency: int
    """rounds between merges"""
    merge_count: int
    """trainers merged at once"""
    merge_batch: str
    """global batch of a merged trainer: the largest of the merged trainers' batches, or
    their sum"""
    lr_scaling: str
    """peak inner lr times (local batch / lr_reference_batch)^p, p = 0, 1/2 or 1"""
    lr_reference_batch: int | None
    """local batch at which the inner lr is inner_lr (null: the run's initial local batch)"""
    switch: str
    """switch policy"""
    switch_lambda: float
    """accumulate above lambda * max_batch"""
    eval_every_rounds: int
    """rounds between evaluations"""
    eval_sequences: int
    """validation sequences per evaluation"""
    eval_batch: int
    """sequences per evaluation batch"""
    checkpoint_every_rounds: int
    """rounds between checkpoints"""
    autocast_dtype: str | None
    """CUDA autocast dtype"""
    pseudo_grad_dtype: str
    """pseudo-gradient communication dtype"""
    nodes_per_device: int | None
    """node slots per device for this run alone (None: cluster.nodes_per_device); a run with
    a constant batch only, since the calibrated max batch is the cluster's slot's"""
    slot_execution: str
    """how one process runs a trainer's node slots: sequential, or vectorized (slots with
    the same passes stacked into one batched pass and one optimizer update); the same
    trajectory up to float rounding and the same simulated time"""

    @classmethod
    def from_dict(cls, settings: dict) -> RunSettings:
        """From a validated merged dict holding every train field and ``name``."""
        return cls(**{**settings, "betas": tuple(settings["betas"])})


# Keys of a run that are not training settings.
RUN_ONLY_KEYS = ("seeds",)


def resolve_run(config: Mapping, name: str) -> RunSettings:
    """The training settings of run ``name``: train + method rules + overrides, validated."""
    if name not in config["runs"]:
        known = ", ".join(sorted(config["runs"]))
        raise ConfigError(f"runs.{name}: no such run (known: {known})")
    overrides = config["runs"][name]
    method = overrides.get("method")
    if method not in METHOD_RULES:
        raise ConfigError(f"runs.{name}.method: must be one of {sorted(METHOD_RULES)}")
    for key, required in METHOD_RULES[method].items():
        if key in overrides and overrides[key] != required:
            raise ConfigError(
                f"runs.{name}.{key}: method {method} requires {required!r}, got {overrides[key]!r}"
            )
    overrides = {k: v for k, v in overrides.items() if k not in RUN_ONLY_KEYS}
    merged = {**copy.deepcopy(config.get("train", {})), **METHOD_RULES[method], **overrides}
    fill_and_check(merged, section_schema("train"), prefix=f"runs.{name}")
    merged["name"] = name
    return RunSettings.from_dict(merged)
