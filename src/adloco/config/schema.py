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

from adloco.core import paths

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


def _whole_text(pattern: str) -> str:
    """``pattern`` with a final ``$`` matching at the very end of the text alone.

    The schema's patterns are JSON Schema's (ECMA-262), where ``$`` matches at
    the end only; Python's ``re`` also matches it before a final line break, so
    ``'run\\n'`` would pass ``^[A-Za-z0-9_-]*$`` and name a folder ending in one.
    """
    if pattern.endswith("$") and not pattern.endswith("\\$"):
        return pattern[:-1] + r"\Z"
    return pattern


def _pattern(validator, pattern, instance, schema):
    if validator.is_type(instance, "string") and not re.search(_whole_text(pattern), instance):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


_DefaultFillingValidator = jsonschema.validators.extend(
    _extend_with_default(jsonschema.Draft202012Validator), {"pattern": _pattern}
)
# The same schema with an integer an int alone: JSON Schema also takes 2.0 for one.
_StrictIntegerValidator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    {"pattern": _pattern},
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine(
        "integer", lambda _, value: isinstance(value, int) and not isinstance(value, bool)
    ),
)


def _key_path(error: jsonschema.ValidationError, prefix: str = "") -> str:
    parts = [str(p) for p in error.absolute_path]
    if error.validator == "required":
        missing = error.message.split("'")[1] if "'" in error.message else ""
        parts.append(missing)
    if error.validator == "additionalProperties" and "'" in error.message:
        parts.append(error.message.split("'")[1])
    key = ".".join(p for p in parts if p)
    return ".".join(p for p in (prefix, key) if p) or "<root>"


# A number in e-notation that reached the schema as text: quoted in a file (which
# adloco reads as YAML 1.2, where `1e-4` is a number), or read by a YAML 1.1 reader
# (PyYAML's own: `1e-4` and `1.0e4` are strings there, `1.0e-4` a number). Where
# the schema wants a number, such a string is read as the number it writes
# (_read_e_notation); the hint below remains for a field that wants an integer.
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


# What YAML 1.1 read as a base-60 number (1:0 is 60) and as a boolean, and YAML 1.2
# (as DVC and adloco read configuration files) reads as text.
_SEXAGESIMAL = re.compile(r"[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?")
_YAML_11_BOOLS = {"y": True, "yes": True, "on": True, "n": False, "no": False, "off": False}


def _text_hint(expected: list[str], text: str) -> str:
    """Why text stands where the schema wants a number or a boolean, and what to write."""
    if {"number", "integer"} & set(expected) and _SEXAGESIMAL.fullmatch(text.strip()):
        return (
            f" (YAML 1.2, which DVC and adloco read, takes {text} as text, not the "
            "base-60 number YAML 1.1 made of it: write the number in decimal)"
        )
    if "boolean" in expected and text.strip().lower() in _YAML_11_BOOLS:
        written = str(_YAML_11_BOOLS[text.strip().lower()]).lower()
        return f" (YAML 1.2, which DVC and adloco read, takes {text} as text: write {written})"
    return ""


def _name_hint(text: str) -> str:
    """Where a name holds whitespace or a control character, which a folder's name must not."""
    for index, char in enumerate(text):
        if char.isspace() or not char.isprintable():
            where = "at its end" if index == len(text) - 1 else f"at character {index + 1}"
            return (
                f" (it holds {char!r} {where}: a name holds no whitespace or control "
                "character, since it names folders and files; remove it)"
            )
    return ""


def _message(error: jsonschema.ValidationError) -> str:
    message = error.message
    instance = error.instance
    if error.validator == "pattern" and isinstance(instance, str):
        message += _name_hint(instance)
    if error.validator != "type":
        return message
    expected = error.validator_value
    expected = expected if isinstance(expected, list) else [expected]
    if "pattern" in error.schema and isinstance(instance, (bool, int, float)):
        # A name such as 1e5 or 2024, which YAML reads as a number.
        kind = "a boolean" if isinstance(instance, bool) else "a number"
        return message + f" (YAML reads the name as {kind}: write it in quotes)"
    if not isinstance(instance, str):
        return message
    message += _text_hint(expected, instance)
    written = _yaml_float(instance)
    if written and {"number", "integer"} & set(expected):
        if not math.isfinite(float(written)):
            # Rewritten, it would read as infinity, which check_finite refuses.
            message += (
                f" (as a number, {instance} is {_TOO_LARGE}, so infinite: write a finite number)"
            )
        else:
            message += f" (text: write {written}, which YAML reads as a number)"
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


def _type_errors(errors) -> list[jsonschema.ValidationError]:
    """The ``type`` errors among ``errors`` and those of their branches (``oneOf``, ...)."""
    found = []
    for error in errors:
        if error.validator == "type":
            found.append(error)
        found += _type_errors(error.context or ())
    return found


def _ints_of_whole_floats(config: dict, schema: dict) -> None:
    """Where the schema wants an integer, put ``int`` in place of a whole float (2.0 is 2).

    JSON Schema takes a float with no fraction for an integer, and ``dvc exp
    run -S key=2.0`` writes one, so a valid configuration could hand 2.0 to
    ``range`` or a tensor's shape; the number meant is not in doubt, so it
    becomes the int. Called once the mapping is valid: every float left at an
    integer key is whole.
    """
    for error in _type_errors(_StrictIntegerValidator(schema).iter_errors(config)):
        expected = error.validator_value
        expected = expected if isinstance(expected, list) else [expected]
        value = error.instance
        if "integer" in expected and isinstance(value, float) and value.is_integer():
            path = list(error.absolute_path)
            parent = config
            for key in path[:-1]:
                parent = parent[key]
            parent[path[-1]] = int(value)


def fill_and_check(config: dict, schema: dict, prefix: str = "") -> dict:
    """Fill ``schema``'s defaults into ``config`` in place and check it against ``schema``.

    A whole float where the schema wants an integer is then made an int
    (:func:`_ints_of_whole_floats`).
    """
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
    _ints_of_whole_floats(config, schema)
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
