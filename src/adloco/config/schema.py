"""The schema: load it, fill its defaults into a configuration, and say what is wrong in one line.

Every message names the key (``runs.adloco.inner_lr``) and the reason, so that
a bad value fails before any job starts.
"""

from __future__ import annotations

import copy
import functools
import math
import re
import sys
from importlib import resources
from pathlib import Path

import jsonschema
import yaml

from adloco import paths

SCHEMA_FILE = "config.schema.yaml"


class ConfigError(ValueError):
    """A configuration value is missing, malformed or inconsistent."""


# A run's name becomes a folder, a Snakemake wildcard, part of a DVC stage name
# (train@<run>-<seed>) and a DVC params key (runs.<run>), where DVC reads a dot
# as a key path: letters, digits, '-' and '_' are what every one of them takes.
RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")


def schema_path() -> Path:
    return Path(str(resources.files("adloco") / "schemas" / SCHEMA_FILE))


@functools.lru_cache(maxsize=1)
def _parsed_schema() -> dict:
    return yaml.safe_load(schema_path().read_text())


def load_schema() -> dict:
    """The configuration schema (a fresh copy each call: validation fills defaults)."""
    return copy.deepcopy(_parsed_schema())


def section_schema(name: str) -> dict:
    """The schema of one top-level section (``train``, ``data``, ...), with the shared ``$defs``."""
    schema = load_schema()
    return {**schema["properties"][name], "$defs": schema["$defs"]}


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
# Where the schema wants a number, such a string is read as the number it
# writes (_read_e_notation); the hint below remains for a field that wants an
# integer.
_E_NOTATION = re.compile(r"([-+]?)(\d*)(?:\.(\d*))?[eE]([-+]?)(\d+)")
# A float64 holds magnitudes up to about 1.8e308; YAML reads a larger one (1.0e+400) as infinity.
_TOO_LARGE = f"beyond the largest number a float holds ({sys.float_info.max:.2g})"


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
            if not math.isfinite(float(written)):
                # Rewritten, it would read as infinity, which check_finite refuses.
                message += (
                    f" (YAML reads {error.instance} as a string, and as a number it is "
                    f"{_TOO_LARGE}, so infinite: write a finite number)"
                )
            else:
                message += (
                    f" (YAML reads {error.instance} as a string: write {written}, with a "
                    "dot before the e and a sign after it)"
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
            why = (
                ""
                if math.isnan(config)
                else f" (YAML reads .inf, or a number {_TOO_LARGE}, as infinity)"
            )
            raise ConfigError(
                f"{prefix or '<root>'}: {config} is not a finite number{why}; write a finite number"
            )
        return
    for key, value in items:
        check_finite(value, f"{prefix}.{key}" if prefix else key)


def _read_e_notation(config: dict, errors: list[jsonschema.ValidationError]) -> bool:
    """Where a number is expected and YAML 1.1 read e-notation as text, put the number.

    PyYAML (YAML 1.1) reads ``1e-4`` or ``3E5`` (no dot, or no exponent sign)
    as strings; YAML 1.2 tools such as DVC's ``-S`` write small values that
    way, and the value meant is not in doubt where the schema wants a number.
    Returns whether anything was replaced (the mapping is then checked again).
    """
    replaced = False
    for error in errors:
        expected = error.validator_value if error.validator == "type" else ()
        expected = expected if isinstance(expected, list) else [expected]
        path = list(error.absolute_path)
        if not (path and "number" in expected and isinstance(error.instance, str)):
            continue
        if _E_NOTATION.fullmatch(error.instance.strip()) and _yaml_float(error.instance):
            parent = config
            for key in path[:-1]:
                parent = parent[key]
            parent[path[-1]] = float(error.instance)
            replaced = True
    return replaced


def fill_and_check(config: dict, schema: dict, prefix: str = "") -> dict:
    """Fill ``schema``'s defaults into ``config`` in place and check it against ``schema``."""
    check_finite(config, prefix)
    validator = _DefaultFillingValidator(schema)
    errors = sorted(validator.iter_errors(config), key=lambda e: list(e.absolute_path))
    if errors and _read_e_notation(config, errors):
        check_finite(config, prefix)  # 1e400 is a number no float holds
        errors = sorted(validator.iter_errors(config), key=lambda e: list(e.absolute_path))
    if errors:
        lines = [f"{_key_path(e, prefix)}: {_message(e)}" for e in errors]
        # One line, every problem in it: what `adloco <stage>: error:` prints.
        raise ConfigError("invalid configuration: " + "; ".join(lines))
    return config


def check_run_names(config: dict) -> None:
    """Refuse a run name that a path, Snakemake or DVC would read otherwise, naming the run.

    Before the schema, whose message for a bad name would not say why.
    """
    runs = config.get("runs")
    if not isinstance(runs, dict):
        return
    for name in runs:
        if name in paths.RESERVED_RUN_NAMES:
            raise ConfigError(
                f"runs.{name}: the name is the pipeline's own (results/<experiment>/checkpoints/"
                f"{name}/ holds the base model's checkpoints, which a run of that name would "
                f"share); rename the run, e.g. {name}-run"
            )
        if isinstance(name, str) and RUN_NAME.fullmatch(name):
            continue
        suggestion = re.sub(r"[^A-Za-z0-9_-]+", "_", str(name)).strip("_-") or "run"
        raise ConfigError(
            f"runs.{name}: a run name holds only letters, digits, '-' and '_', and starts with "
            "a letter or digit (it names a folder, a Snakemake wildcard and DVC's params key "
            f"runs.<name>, where a dot separates keys); rename the run, e.g. {suggestion}"
        )
