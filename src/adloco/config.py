"""Configuration: load a YAML file, fill defaults from the JSON schema, validate.

Every CLI command and the Snakemake workflow go through :func:`load_config`, so
a bad value fails before any job starts, with the key and the reason. A run
(an entry of ``runs``) is ``train`` overridden by the run's fields, then checked
against the same ``train`` schema and the rules of its method
(:func:`resolve_run`).
"""

from __future__ import annotations

import copy
import functools
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import yaml

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
    "adloco": {},
}


class ConfigError(ValueError):
    """A configuration value is missing, malformed or inconsistent."""


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


def validate(config: dict, schema: dict | None = None, prefix: str = "") -> dict:
    """Fill defaults into ``config`` in place and validate it; return it."""
    schema = schema if schema is not None else load_schema()
    validator = _DefaultFillingValidator(schema)
    errors = sorted(validator.iter_errors(config), key=lambda e: list(e.absolute_path))
    if errors:
        lines = [f"{_key_path(e, prefix)}: {e.message}" for e in errors]
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(lines))
    _check_consistency(config)
    return config


def _check_consistency(config: dict) -> None:
    if "runs" not in config:
        return
    slots = total_slots(config)
    for name in config["runs"]:
        run = resolve_run(config, name)
        if run["initial_trainers"] > slots:
            raise ConfigError(
                f"runs.{name}.initial_trainers: {run['initial_trainers']} trainers need at least "
                f"as many node slots, the cluster has {slots}"
            )
        source = run["inner_steps_from"]
        if source is not None:
            if source not in config["runs"] or source == name:
                raise ConfigError(
                    f"runs.{name}.inner_steps_from: {source!r} is not another run of `runs`"
                )
            if run["initial_trainers"] != 1:
                raise ConfigError(
                    f"runs.{name}.inner_steps_from: only a run of one trainer (diloco, localsgd) "
                    "can match communications by its H"
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
    if config["data"]["source"] == "hub" and config["data"].get("max_documents") is None:
        raise ConfigError(
            "data.max_documents: required when data.source is hub (C4 is 365M documents)"
        )
    m = config["model"]
    if m["hidden_size"] % m["num_attention_heads"]:
        raise ConfigError("model.hidden_size: must be a multiple of model.num_attention_heads")
    if m["num_attention_heads"] % m["num_key_value_heads"]:
        raise ConfigError("model.num_key_value_heads: must divide model.num_attention_heads")


def load_config(path: str | Path) -> dict:
    """Read, default-fill and validate a configuration file."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"configuration file not found: {path}")
    try:
        config = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(config, dict):
        raise ConfigError(f"{path}: the top level must be a mapping")
    return validate(config)


def total_slots(config: dict) -> int:
    """Node slots of the cluster: devices x nodes_per_device."""
    cluster = config["cluster"]
    return sum(d.get("count", 1) for d in cluster["devices"]) * cluster.get("nodes_per_device", 1)


def resolve_run(config: dict, name: str) -> dict:
    """The training settings of run ``name``: train + method rules + overrides."""
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
    merged = {**copy.deepcopy(config.get("train", {})), **METHOD_RULES[method], **overrides}
    schema = load_schema()
    train_schema = schema["properties"]["train"]
    train_schema["$defs"] = schema["$defs"]
    validate(merged, train_schema, prefix=f"runs.{name}")
    merged["name"] = name
    return merged
