"""Configuration: load a YAML file, fill defaults from the JSON schema, validate.

Every CLI command and the Snakemake workflow go through :func:`load_config`, so
a bad value fails before any job starts, with the key and the reason. A run
(an entry of ``runs``) is ``train`` overridden by the run's fields, then checked
against the same ``train`` schema and the rules of its method
(:func:`resolve_run`), returned as a frozen :class:`RunSettings`.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
import re
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from adloco import model_size, paths

SCHEMA_FILE = "config.schema.yaml"

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
    slot_execution: str
    """how one process runs a trainer's node slots: sequential, or vectorized (slots with
    the same passes stacked into one batched pass and one optimizer update); the same
    trajectory up to float rounding and the same simulated time"""

    @classmethod
    def from_dict(cls, settings: dict) -> RunSettings:
        """From a validated merged dict holding every train field and ``name``."""
        return cls(**{**settings, "betas": tuple(settings["betas"])})


class ConfigError(ValueError):
    """A configuration value is missing, malformed or inconsistent."""


# A run's name becomes a folder, a Snakemake wildcard, part of a DVC stage name
# (train@<run>-<seed>) and a DVC params key (runs.<run>), where DVC reads a dot
# as a key path: letters, digits, '-' and '_' are what every one of them takes.
RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
# The report's settings that name runs.
REPORT_ROLES = ("adloco", "diloco", "ddp", "baselines", "ablations")


def schema_path() -> Path:
    return Path(str(resources.files("adloco") / "schemas" / SCHEMA_FILE))


@functools.lru_cache(maxsize=1)
def _parsed_schema() -> dict:
    return yaml.safe_load(schema_path().read_text())


def load_schema() -> dict:
    """The configuration schema (a fresh copy each call: validation fills defaults)."""
    return copy.deepcopy(_parsed_schema())


def _extend_with_default(validator_class):
    """A validator that fills ``default`` values of absent properties."""
    validate_properties = validator_class.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, subschema in properties.items():
                if "default" in subschema and name not in instance:
                    instance[name] = copy.deepcopy(subschema["default"])
        yield from validate_properties(validator, properties, instance, schema)

    return jsonschema.validators.extend(validator_class, {"properties": set_defaults})


_DefaultFillingValidator = _extend_with_default(jsonschema.Draft202012Validator)


def _key_path(error: jsonschema.ValidationError, prefix: str = "") -> str:
    parts = [str(p) for p in error.absolute_path]
    if error.validator == "required":
        missing = error.message.split("'")[1] if "'" in error.message else ""
        parts.append(missing)
    if error.validator == "additionalProperties" and "'" in error.message:
        parts.append(error.message.split("'")[1])
    key = ".".join(p for p in parts if p)
    return ".".join(p for p in (prefix, key) if p) or "<root>"


# What YAML 1.1 (PyYAML) takes for a float needs a dot in the mantissa and a
# sign in the exponent: `1e-4` and `1.0e4` are strings, `1.0e-4` is a number.
_E_NOTATION = re.compile(r"([-+]?)(\d*)(?:\.(\d*))?[eE]([-+]?)(\d+)")


def _yaml_float(text: str) -> str | None:
    """How to write ``text`` (a number in e-notation) so that YAML reads a float."""
    match = _E_NOTATION.fullmatch(text.strip())
    if not match or not (match.group(2) or match.group(3)):
        return None
    sign, whole, frac, exp_sign, exp = match.groups()
    return f"{sign}{whole or '0'}.{frac or '0'}e{exp_sign or '+'}{exp}"


def _message(error: jsonschema.ValidationError) -> str:
    message = error.message
    if error.validator == "type" and isinstance(error.instance, str):
        expected = error.validator_value
        expected = expected if isinstance(expected, list) else [expected]
        written = _yaml_float(error.instance)
        if written and {"number", "integer"} & set(expected):
            message += (
                f" (YAML reads {error.instance} as a string: write {written}, with a dot "
                "before the e and a sign after it)"
            )
    return message


def check_finite(config: object, prefix: str = "") -> None:
    """Refuse NaN and infinities anywhere in a loaded configuration, naming the key."""
    if isinstance(config, dict):
        items = ((str(k), v) for k, v in config.items())
    elif isinstance(config, list):
        items = ((str(i), v) for i, v in enumerate(config))
    else:
        if isinstance(config, float) and not math.isfinite(config):
            raise ConfigError(f"{prefix or '<root>'}: {config} is not a finite number")
        return
    for key, value in items:
        check_finite(value, f"{prefix}.{key}" if prefix else key)


def validate(config: dict, schema: dict | None = None, prefix: str = "") -> dict:
    """Fill defaults into ``config`` in place and validate it; return it."""
    check_finite(config, prefix)
    full_config = schema is None
    if full_config:
        # Before the schema, whose message for a bad name would not say why.
        check_run_names(config)
    schema = schema if schema is not None else load_schema()
    validator = _DefaultFillingValidator(schema)
    errors = sorted(validator.iter_errors(config), key=lambda e: list(e.absolute_path))
    if errors:
        lines = [f"{_key_path(e, prefix)}: {_message(e)}" for e in errors]
        # One line, every problem in it: what `adloco <stage>: error:` prints.
        raise ConfigError("invalid configuration: " + "; ".join(lines))
    _check_consistency(config)
    if full_config and "runs" in config:
        check_report_roles(config)
        check_model_fits(config)
    return config


def setting_key(config: dict, name: str, field: str) -> str:
    """Where a run's setting is written: in the run, else in ``train`` (for messages)."""
    return f"runs.{name}.{field}" if field in config["runs"][name] else f"train.{field}"


def _check_consistency(config: dict) -> None:
    if "runs" not in config:
        return
    seen: dict[str, int] = {}
    for index, device in enumerate(config["cluster"]["devices"]):
        if device["name"] in seen:
            raise ConfigError(
                f"cluster.devices.{index}.name: {device['name']!r} is also the name of "
                f"cluster.devices.{seen[device['name']]}; each device needs its own name (its "
                f"calibration file is {paths.calibration_file(config['experiment'], '<name>')})"
            )
        seen[device["name"]] = index
    slots = total_slots(config)
    for name in config["runs"]:
        run = resolve_run(config, name)
        if run.initial_trainers > slots:
            raise ConfigError(
                f"runs.{name}.initial_trainers: {run.initial_trainers} trainers need at least "
                f"as many node slots, the cluster has {slots}"
            )
        _check_statistics(config, name, run)
        if run.merge != "none" and run.merge_count > run.initial_trainers:
            raise ConfigError(
                f"{setting_key(config, name, 'merge_count')}: run {name} merges "
                f"{run.merge_count} trainers at once but starts with "
                f"{run.initial_trainers} ({setting_key(config, name, 'initial_trainers')}), "
                "so it would never merge; lower merge_count or set merge: none"
            )
    cluster = config["cluster"]
    devices = sum(d.get("count", 1) for d in cluster["devices"])
    if cluster.get("processes_per_machine", 1) > devices:
        raise ConfigError(
            f"cluster.processes_per_machine: {cluster['processes_per_machine']} processes for "
            f"{devices} devices; every process needs at least one device"
        )
    tok = config["data"]["tokenizer"]
    if tok["kind"] == "pretrained" and not tok.get("name"):
        raise ConfigError("data.tokenizer.name: required when data.tokenizer.kind is pretrained")
    if config["model"]["source"] == "pretrained" and not config["model"].get("name"):
        raise ConfigError("model.name: required when model.source is pretrained")
    if config["model"]["source"] == "base":
        if "pretrain" not in config:
            raise ConfigError("pretrain: required when model.source is base (the base's loop)")
        if not config["data"].get("base_fraction", 0) > 0:
            raise ConfigError(
                "data.base_fraction: must be above 0 when model.source is base, so that the "
                "base model pretrains on documents the runs never train on"
            )
    if config["data"]["source"] == "hub" and config["data"].get("max_documents") is None:
        raise ConfigError(
            "data.max_documents: required when data.source is hub (C4 is 365M documents)"
        )
    m = config["model"]
    if m["hidden_size"] % m["num_attention_heads"]:
        raise ConfigError("model.hidden_size: must be a multiple of model.num_attention_heads")
    if m["num_attention_heads"] % m["num_key_value_heads"]:
        raise ConfigError("model.num_key_value_heads: must divide model.num_attention_heads")


def _check_statistics(config: dict, name: str, run: RunSettings) -> None:
    """A batch test needs blocks of two groups or more, and vector mode one point per round."""
    if run.batch_test == "none":
        return
    if run.stats_steps == 1 and run.stats_microbatches == 1:
        raise ConfigError(
            f"{setting_key(config, name, 'stats_microbatches')}: run {name} has one group per "
            "statistics block (stats_steps 1, stats_microbatches 1), so its batch test has no "
            "variance to read; raise stats_microbatches or stats_steps"
        )
    if run.stats_reduce == "vector" and (run.stats_steps != 1 or run.stats_blocks != "first"):
        raise ConfigError(
            f"{setting_key(config, name, 'stats_reduce')}: vector pools the groups of every node "
            "at the trainer's common point, the round's first step: it needs stats_steps 1 and "
            "stats_blocks first"
        )


def check_run_names(config: dict) -> None:
    """Refuse a run name that a path, Snakemake or DVC would read otherwise, naming the run."""
    runs = config.get("runs")
    if not isinstance(runs, dict):
        return
    for name in runs:
        if isinstance(name, str) and RUN_NAME.fullmatch(name):
            continue
        suggestion = re.sub(r"[^A-Za-z0-9_-]+", "_", str(name)).strip("_-") or "run"
        raise ConfigError(
            f"runs.{name}: a run name holds only letters, digits, '-' and '_', and starts with "
            "a letter or digit (it names a folder, a Snakemake wildcard and DVC's params key "
            f"runs.<name>, where a dot separates keys); rename the run, e.g. {suggestion}"
        )


def check_report_roles(config: dict) -> None:
    """Every run the ``report`` section names is a run of this configuration.

    Checked at load, so that a typo fails before any training rather than in
    the report job after all of it.
    """
    report = config.get("report") or {}
    runs = config["runs"]
    targets = report.get("targets")
    named = {f"report.{role}": report.get(role) for role in REPORT_ROLES}
    if isinstance(targets, dict):
        named["report.targets.derived_runs"] = targets.get("derived_runs")
    for key, value in named.items():
        names = [value] if isinstance(value, str) else list(value or [])
        for name in names:
            if name not in runs:
                raise ConfigError(
                    f"{key}: no run named {name} (runs: {', '.join(runs)}); name one "
                    "of them, or null to let the report detect it"
                )


def check_model_fits(config: dict) -> None:
    """Refuse a model whose training state alone exceeds one node slot's memory share.

    What calibration would find only after building the model (or the
    allocator, with a traceback): weights, gradients and AdamW's two moments
    (:func:`adloco.model_size.training_state_bytes`) must fit the share
    ``memory_gib / nodes_per_device`` of every device. A pretrained model's size
    is known only once it is loaded, so it is not checked here.
    """
    model = config["model"]
    if model["source"] == "pretrained":
        return
    tokenizer = config["data"]["tokenizer"]
    # Only a BPE's vocabulary is known before tokenization; 0 keeps the estimate a lower bound.
    vocab = tokenizer.get("vocab_size", 0) if tokenizer["kind"] == "bpe" else 0
    params = model_size.parameter_count(model, vocab)
    need = model_size.training_state_bytes(params, model["dtype"])
    per_device = config["cluster"].get("nodes_per_device", 1)
    for index, device in enumerate(config["cluster"]["devices"]):
        share = device["memory_gib"] * model_size.GIB / per_device
        if need > share:
            raise ConfigError(
                f"model: {params:,} parameters (hidden_size {model['hidden_size']}, "
                f"{model['num_hidden_layers']} layers) need {need / model_size.GIB:.3g} GiB for "
                f"weights, gradients and AdamW's moments at {model['dtype']}, more than a node "
                f"slot of cluster.devices.{index} ({device['name']}) has: "
                f"{device['memory_gib']:g} GiB / {per_device} slots = "
                f"{share / model_size.GIB:.3g} GiB; make the model smaller (model.hidden_size, "
                "model.num_hidden_layers) or give the device more memory_gib"
            )


def check_experiment_named(config: dict, path: str | Path) -> None:
    """A configuration file names its experiment: without one it would write another's results."""
    if "experiment" not in config:
        stem = Path(path).stem
        suggestion = stem if RUN_NAME.fullmatch(stem) else "my-variant"
        raise ConfigError(
            f"{path}: experiment: required; it names the folder of this configuration's "
            f"results (results/<experiment>/), so that it never overwrites another "
            f"configuration's; add a name of its own, e.g. experiment: {suggestion}"
        )


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """One line: where (line and column, 1-based) and what."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None)
    what = f"{problem} ({context})" if context else problem
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return " ".join(f"{where}{what}".split())


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key written twice in one mapping.

    YAML itself keeps the last of two equal keys without a word, so an edit
    lower in the file would silently replace the value above it (or the
    other way round). Keys a merge (``<<``) brings in may be overridden.
    """

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            first_line: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                line = key_node.start_mark.line + 1
                try:
                    earlier = first_line.setdefault(key, line)
                except TypeError:  # an unhashable key: the safe loader's own error follows
                    continue
                if earlier != line:
                    raise yaml.constructor.ConstructorError(
                        None,
                        None,
                        f"key {key!r} is written twice, on lines {earlier} and {line} (YAML "
                        "would keep only the last); keep one of them",
                        key_node.start_mark,
                    )
        return super().construct_mapping(node, deep=deep)


def read_yaml(path: str | Path) -> dict:
    """The mapping a YAML configuration file holds; a clear one-line error otherwise.

    A syntax error names the file, line and column; a key written twice in one
    mapping names both lines.
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"configuration file not found: {path}")
    try:
        with open(path, encoding="utf-8") as fh:
            config = yaml.load(fh, Loader=_UniqueKeyLoader)  # noqa: S506 (a safe loader)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {_yaml_problem(exc)}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    if not isinstance(config, dict):
        raise ConfigError(f"{path}: the top level must be a mapping")
    return config


def load_config(path: str | Path) -> dict:
    """Read, default-fill and validate a configuration file."""
    config = read_yaml(path)
    check_experiment_named(config, path)
    return validate(config)


def check_subset_fraction(
    config: dict, run: RunSettings, train_sequences: int, initial_local_batch: int
) -> None:
    """Refuse a subset_fraction that leaves a trainer fewer sequences than its first batch.

    It needs the train split's size, known only once the data is tokenized, so
    ``adloco train`` checks it when it opens the data (not the schema).
    ``run`` is the resolved run; ``initial_local_batch`` its local batch per
    node slot at the start. A trainer starts on an equal share of the node
    slots (the larger share when they do not divide evenly), its global batch
    that many times the local batch, and draws from a subset of
    ``max(1, round(train_sequences * subset_fraction))`` sequences.
    """
    name = run.name
    fraction = run.subset_fraction
    subset = max(1, round(train_sequences * fraction))
    slots = total_slots(config)
    trainers = run.initial_trainers
    batch = initial_local_batch * math.ceil(slots / trainers)
    if subset < batch:
        need = batch / train_sequences
        raise ConfigError(
            f"{setting_key(config, name, 'subset_fraction')}: {fraction} of the "
            f"{train_sequences} train sequences leaves {subset} sequences per trainer, fewer "
            f"than run {name}'s first batch of {batch} ({initial_local_batch} per node slot x "
            f"{math.ceil(slots / trainers)} slots); raise it to at least {need:.3g} or lower "
            "the batch"
        )


def total_slots(config: dict) -> int:
    """Node slots of the cluster: devices x nodes_per_device."""
    cluster = config["cluster"]
    return sum(d.get("count", 1) for d in cluster["devices"]) * cluster.get("nodes_per_device", 1)


# Keys of a run that are not training settings.
RUN_ONLY_KEYS = ("seeds",)


def run_seeds(config: dict, name: str) -> list[int]:
    """The training seeds of run ``name``: its own ``seeds``, else the top-level ones."""
    return list(config["runs"][name].get("seeds", config["seeds"]))


def resolve_run(config: dict, name: str) -> RunSettings:
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
    schema = load_schema()
    train_schema = schema["properties"]["train"]
    train_schema["$defs"] = schema["$defs"]
    validate(merged, train_schema, prefix=f"runs.{name}")
    merged["name"] = name
    return RunSettings.from_dict(merged)
