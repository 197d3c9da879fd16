"""Reading a configuration file: YAML with clear one-line errors, and the file's experiment."""

from __future__ import annotations

import math
import re
from pathlib import Path

import yaml

from adloco.config.schema import RUN_NAME, ConfigError

COMMENT_AT = 32  # the column of the trailing comments of config/*.yaml


def yaml_line(indent: int, key: str, value: str, comment: str | None) -> str:
    """``key: value`` with its trailing comment at the column config/*.yaml use.

    For the scripts that write a configuration from another (scripts/tune-grid.py,
    scripts/seed-count.py), so their lines read as the hand-written files do.
    """
    text = f"{' ' * indent}{key}: {value}" if value else f"{' ' * indent}{key}:"
    if comment:
        text = text.ljust(COMMENT_AT - 1) + f" # {comment}"
    return text + "\n"


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


class _Refused(yaml.MarkedYAMLError):
    """Valid YAML that a configuration file may not hold (an alias), with where it is."""


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


class ConfigLoader(_UniqueKeyLoader):
    """The one loader of configuration files: YAML 1.2's core schema, no aliases.

    DVC (``dvc exp run -S``, ``dvc params diff``) reads and writes
    ``params.yaml`` as YAML 1.2, where PyYAML's YAML 1.1 reads some plain
    values otherwise: ``1:0`` is the base-60 number 60, ``yes``/``no``/``on``/
    ``off`` are booleans, ``2024-01-01`` a date and ``1e-5`` a string. Here a
    plain value is an int, a float, a boolean or null only as DVC's YAML 1.2
    reads them (``1``, ``1_000``, ``0x1f``, ``1.5``, ``1e-5``, ``.inf``,
    ``true``, ``null``), and text otherwise, so every stage reads what DVC
    records.

    An alias (``*name``) is refused with its line: each level of nested
    aliases multiplies what a file of a few kilobytes expands to (the
    "billion laughs"), and every value is walked after loading; no preset
    needs one.
    """

    yaml_implicit_resolvers: dict = {}  # replaced, not extended: PyYAML's are YAML 1.1's

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise _Refused(
                None,
                None,
                f"an alias (*{event.anchor}) repeats a value written elsewhere; a "
                "configuration file holds no aliases (nested ones expand without bound): "
                f"write the value of &{event.anchor} out in full here",
                event.start_mark,
            )
        return super().compose_node(parent, index)


# The plain values YAML 1.2 reads as null, booleans, ints and floats, as ruamel.yaml's
# YAML 1.2 resolver reads them: DVC reads params.yaml with it, so what a stage reads is
# what `dvc params diff` shows and `${key}` interpolates. Like YAML 1.2's core schema
# (https://yaml.org/spec/1.2.2/#1032-tag-resolution), with ruamel's `_` between digits,
# `0b` ints and leading zeros (decimal: 017 is 17); no dates. Anchored at the very end
# (`$` would also match before a final line break).
_YAML_12 = (
    ("null", r"(?:~|null|Null|NULL|)", ["~", "n", "N", ""]),
    ("bool", r"(?:true|True|TRUE|false|False|FALSE)", list("tTfF")),
    (  # int before float: `1` is both
        "int",
        r"[-+]?(?:0b[0-1_]+|0o?[0-7_]+|[0-9_]+|0x[0-9a-fA-F_]+)",
        list("-+0123456789"),
    ),
    (
        "float",
        r"[-+]?(?:[0-9][0-9_]*\.[0-9_]*(?:[eE][-+]?[0-9]+)?|[0-9][0-9_]*[eE][-+]?[0-9]+"
        r"|\.[0-9_]+(?:[eE][-+][0-9]+)?|\.(?:inf|Inf|INF))|\.(?:nan|NaN|NAN)",
        list("-+.0123456789"),
    ),
    ("merge", r"<<", ["<"]),
)
for _tag, _pattern, _first in _YAML_12:
    ConfigLoader.add_implicit_resolver(
        f"tag:yaml.org,2002:{_tag}", re.compile(rf"(?:{_pattern})\Z"), _first
    )


def _scalar(loader: yaml.SafeLoader, node: yaml.ScalarNode, read):
    """``read`` of the node's text; an explicit tag on other text (``!!int 1:0``) is named."""
    text = loader.construct_scalar(node)
    try:
        return read(text)
    except (ValueError, KeyError):
        raise yaml.constructor.ConstructorError(
            None, None, f"{text!r} is no {node.tag.rsplit(':', 1)[-1]} in YAML 1.2", node.start_mark
        ) from None


_INT_BASES = {"0b": 2, "0o": 8, "0x": 16}


def _int(text: str) -> int:
    digits = text.replace("_", "")
    sign = -1 if digits.startswith("-") else 1
    digits = digits.lstrip("-+")
    base = _INT_BASES.get(digits[:2], 10)
    return sign * int(digits[2:] if base != 10 else digits, base)


def _float(text: str) -> float:
    lowered = text.replace("_", "").lower()
    special = {".inf": math.inf, "+.inf": math.inf, "-.inf": -math.inf, ".nan": math.nan}
    return special[lowered] if lowered in special else float(lowered)


ConfigLoader.add_constructor("tag:yaml.org,2002:int", lambda ld, node: _scalar(ld, node, _int))
ConfigLoader.add_constructor("tag:yaml.org,2002:float", lambda ld, node: _scalar(ld, node, _float))
ConfigLoader.add_constructor(
    "tag:yaml.org,2002:bool",
    lambda ld, node: _scalar(ld, node, lambda text: {"true": True, "false": False}[text.lower()]),
)


def load_yaml_text(text: str):
    """What YAML text holds, read as a configuration file is (:class:`ConfigLoader`)."""
    return yaml.load(text, Loader=ConfigLoader)  # noqa: S506 (a safe loader)


class ConfigDumper(yaml.SafeDumper):
    """PyYAML's safe dumper quoting what :class:`ConfigLoader` would not read back as text.

    PyYAML writes a string unquoted wherever YAML 1.1 reads it as a string, so
    the name ``1e5`` would come back from a written file (``params.yaml``) as
    the number 100000.0; with YAML 1.2's rules it is quoted, and ``yes`` no
    longer needs to be. A date such as ``2024-01-01`` is quoted too: DVC's
    reader takes it for a date. No anchors or aliases are written.
    """

    yaml_implicit_resolvers = {
        first: list(pairs) for first, pairs in ConfigLoader.yaml_implicit_resolvers.items()
    }

    def ignore_aliases(self, data) -> bool:
        return True  # an object met twice is written twice: the loader refuses aliases


for _first, _pairs in yaml.SafeDumper.yaml_implicit_resolvers.items():
    for _tag, _regexp in _pairs:
        if _tag == "tag:yaml.org,2002:timestamp":
            ConfigDumper.add_implicit_resolver(_tag, _regexp, [_first])


def dump_yaml(data, **options) -> str:
    """YAML text of ``data`` that :func:`load_yaml_text` reads back equal.

    ``options`` are ``yaml.dump``'s (``sort_keys``, ``width``...).
    """
    return yaml.dump(data, Dumper=ConfigDumper, **options)


def read_yaml(path: str | Path) -> dict:
    """The mapping a YAML configuration file holds; a clear one-line error otherwise.

    Read as YAML 1.2, as DVC reads it (:class:`ConfigLoader`). A syntax error
    names the file, line and column; a key written twice in one mapping names
    both lines, an alias its line; a file that is not text, or nests deeper
    than the parser goes, is named too.
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"configuration file not found: {path}")
    try:
        with open(path, encoding="utf-8") as fh:
            config = yaml.load(fh, Loader=ConfigLoader)  # noqa: S506 (a safe loader)
    except _Refused as exc:
        raise ConfigError(f"{path}: {_yaml_problem(exc)}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {_yaml_problem(exc)}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    except RecursionError:
        raise ConfigError(
            f"{path}: nests too deeply to read as YAML; start again from a copy of "
            "config/config.yaml"
        ) from None
    if not isinstance(config, dict):
        raise ConfigError(f"{path}: the top level must be a mapping")
    return config
