"""Reading a configuration file: YAML with clear one-line errors, and the file's experiment."""

from __future__ import annotations

from pathlib import Path

import yaml

from adloco.config.schema import RUN_NAME, ConfigError


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
    mapping names both lines; a file that is not text, or nests deeper than the
    parser goes, is named too.
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
    except RecursionError:
        raise ConfigError(
            f"{path}: nests too deeply to read as YAML; start again from a copy of "
            "config/config.yaml"
        ) from None
    if not isinstance(config, dict):
        raise ConfigError(f"{path}: the top level must be a mapping")
    return config
