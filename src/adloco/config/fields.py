"""One declaration per setting: its schema, its default and its description, on its field.

Every field of a configuration dataclass (:mod:`adloco.config.types` and the
section modules it gathers, :class:`adloco.config.runs.RunSettings`) is written
``name: type = setting(default, description, **schema)``: the JSON-schema
fragment that checks its value (``type``, ``enum``, bounds, ``oneOf``...),
the default the schema fills in, and the line that says what it is.
:mod:`adloco.config.generate` builds the schema file from these declarations.
The dataclass itself gets no default: a field is filled from the validated,
default-filled mapping, so that a value is never defaulted twice.
Only the standard library here: the Snakemake workflow imports the package's
configuration modules with nothing but jsonschema and PyYAML besides.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

# The key of a field's metadata that holds its Declaration.
SETTING = "adloco.setting"


class _Marker:
    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name


# A setting the user must write (the schema's `required`).
REQUIRED = _Marker("REQUIRED")
# A setting the user may leave out, with no default (a section that is then None).
OPTIONAL = _Marker("OPTIONAL")

# Fragments shared by several settings, kept under the schema's `$defs`.
SHARED_DEFS: dict[str, dict[str, Any]] = {
    "positive_int": {"type": "integer", "minimum": 1},
    "fraction": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
}
POSITIVE_INT = {"$ref": "#/$defs/positive_int"}
FRACTION = {"$ref": "#/$defs/fraction"}
# Adam's two betas, each in [0, 1).
BETAS = {
    "type": "array",
    "items": {"type": "number", "minimum": 0, "exclusiveMaximum": 1},
    "minItems": 2,
    "maxItems": 2,
}


@dataclasses.dataclass(frozen=True)
class Declaration:
    """What one setting is: its default (or REQUIRED, OPTIONAL), description and schema."""

    default: Any
    description: str | None
    schema: Mapping[str, Any]


def setting(default: Any, description: str | None = None, **schema: Any) -> Any:
    """A dataclass field declared as a setting (``schema``: its JSON-schema keywords)."""
    return dataclasses.field(metadata={SETTING: Declaration(default, description, schema)})


def declaration(field: dataclasses.Field) -> Declaration | None:
    """The setting a dataclass field declares, or None for a field that is no setting."""
    return field.metadata.get(SETTING)


def default_first(default: str, names: Iterable[str]) -> list[str]:
    """An enum's values: the default first, then the others in their declared order."""
    return [default, *(name for name in names if name != default)]
