"""Reading a configuration file: one-line YAML errors, keys written twice, the experiment named."""

from __future__ import annotations

import pytest

from adloco.config import ConfigError, check_experiment_named, load_config, read_yaml


def test_not_yaml_and_missing_file_are_clear(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("train: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "missing.yaml")


def test_a_yaml_syntax_error_names_the_file_line_and_column(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("seed: 0\ndata:\n  dataset: x\n   source: local\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    message = str(err.value)
    assert message.startswith(f"{path}: not valid YAML: line 4, column ")
    assert "\n" not in message


def test_one_key_in_two_mappings_and_a_merge_override_are_not_written_twice(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("a: {lr: 1}\nb: {lr: 2}\nrun:\n  <<: {lr: 3, steps: 4}\n  lr: 5\n")
    assert read_yaml(path) == {"a": {"lr": 1}, "b": {"lr": 2}, "run": {"lr": 5, "steps": 4}}


def test_a_nested_key_written_twice_names_both_lines_and_the_second_column(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("x: 1\ntrain:\n  lr: 1\n  steps: 2\n  lr: 3\n")
    with pytest.raises(ConfigError) as err:
        read_yaml(path)
    assert str(err.value) == (
        f"{path}: not valid YAML: line 5, column 3: key 'lr' is written twice, on lines 3 and 5 "
        "(YAML would keep only the last); keep one of them"
    )


def test_a_file_that_is_not_a_mapping_or_not_utf8_is_refused(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("- a\n- b\n")
    with pytest.raises(ConfigError) as err:
        read_yaml(path)
    assert str(err.value) == f"{path}: the top level must be a mapping"
    path.write_bytes(b"seed: 0\nname: caf\xe9\n")
    with pytest.raises(ConfigError) as err:
        read_yaml(path)
    assert str(err.value) == f"{path}: not UTF-8 text (byte 17: invalid continuation byte)"
    path.write_text("")  # an empty file is None to YAML
    with pytest.raises(ConfigError, match="the top level must be a mapping"):
        read_yaml(path)


@pytest.mark.parametrize(
    ("file", "suggestion"),
    [
        ("small-memory.yaml", "small-memory"),
        ("my.variant.yaml", "my-variant"),
        ("-x.yml", "my-variant"),
    ],
)
def test_a_file_without_experiment_is_refused_with_a_name_from_its_stem(tmp_path, file, suggestion):
    path = tmp_path / file
    check_experiment_named({"experiment": "e"}, path)
    with pytest.raises(ConfigError) as err:
        check_experiment_named({"seed": 0}, path)
    message = str(err.value)
    assert message.startswith(f"{path}: experiment: required; it names the folder")
    assert message.endswith(f"add a name of its own, e.g. experiment: {suggestion}")
