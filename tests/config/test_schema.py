"""The schema: defaults filled, one-line errors naming the key, finite numbers, run names."""

from __future__ import annotations

import pytest
import yaml

from adloco.config import ConfigError, check_finite, config_from_dict, load_config, validate
from adloco.config.schema import check_run_names, fill_and_check
from adloco.config.yaml_file import load_yaml_text
from config_edits import PRESET, base


def test_defaults_come_from_the_schema():
    cfg = base()
    del cfg["train"]["inner_steps"]
    del cfg["calibration"]
    cfg = validate(cfg)
    assert cfg["train"]["inner_steps"] == 200  # the schema's default, the paper's H
    assert cfg["calibration"]["margin"] == 0.9


# A schema written here, so that every default and message below is known by hand.
SMALL = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "a": {"type": "integer", "default": 3},
        "b": {
            "type": "object",
            "default": {},
            "properties": {"c": {"type": "string", "default": "x"}, "d": {"type": "number"}},
        },
    },
}


def test_defaults_are_filled_at_every_depth_and_never_shared():
    first = fill_and_check({}, SMALL)
    assert first == {"a": 3, "b": {"c": "x"}}
    first["b"]["c"] = "changed"
    # A default is copied into each configuration, not the schema's own object.
    assert fill_and_check({}, SMALL) == {"a": 3, "b": {"c": "x"}}
    # A value given is kept; only the absent ones are filled.
    assert fill_and_check({"b": {"c": "y", "d": 1.5}}, SMALL) == {"a": 3, "b": {"c": "y", "d": 1.5}}


def test_every_problem_is_one_line_naming_its_key_under_the_prefix():
    with pytest.raises(ConfigError) as err:
        fill_and_check({"a": "x", "b": {"c": 1}, "e": 0}, SMALL, prefix="sec")
    assert str(err.value) == (
        "invalid configuration: "
        "sec.e: Additional properties are not allowed ('e' was unexpected); "
        "sec.a: 'x' is not of type 'integer'; "
        "sec.b.c: 1 is not of type 'string'"
    )


@pytest.mark.parametrize(
    ("written", "hint", "unquoted"),
    [("5e3", "5.0e+3", 5000.0), (".5E3", "0.5e+3", ".5E3"), ("-2.e7", "-2.0e+7", -2e7)],
)
def test_e_notation_yaml_reads_as_text_is_the_number_or_gets_a_hint(written, hint, unquoted):
    assert yaml.safe_load(f"x: {hint}")["x"] == float(written)
    assert load_yaml_text(f"x: {hint}")["x"] == float(written)
    assert isinstance(yaml.safe_load(f"x: {written}")["x"], str)
    # Where a number is wanted, the text is read as the number it writes.
    assert fill_and_check({"b": {"d": written}}, SMALL)["b"]["d"] == float(written)
    # Where an integer is wanted, the text is refused, with a way to write the number.
    with pytest.raises(ConfigError) as err:
        fill_and_check({"a": written}, SMALL)
    assert str(err.value) == (
        f"invalid configuration: a: '{written}' is not of type 'integer' (text: write {hint}, "
        "which YAML reads as a number)"
    )
    # Unquoted in a file, YAML 1.2 reads 5e3 as the number (a whole one: the int), but
    # .5E3, with no sign after the e, as text, as DVC does.
    loaded = load_yaml_text(f"a: {written}")["a"]
    assert loaded == unquoted and type(loaded) is type(unquoted)
    if isinstance(unquoted, float):
        filled = fill_and_check({"a": loaded}, SMALL)["a"]
        assert filled == unquoted and type(filled) is int


def test_a_string_that_is_no_number_gets_no_hint():
    with pytest.raises(ConfigError) as err:
        fill_and_check({"b": {"d": "fast"}}, SMALL)
    assert str(err.value) == "invalid configuration: b.d: 'fast' is not of type 'number'"


def test_check_finite_names_the_key_at_any_depth():
    check_finite({"a": [1.0, {"b": 2}], "c": "nan"})  # a string "nan" is the schema's business
    with pytest.raises(ConfigError) as err:
        check_finite({"a": [1.0, {"b": float("-inf")}]})
    assert str(err.value) == (
        "a.1.b: -inf is not a finite number (YAML reads .inf, or a number beyond the largest "
        "number a float holds (1.8e+308), as infinity); write a finite number"
    )
    with pytest.raises(ConfigError) as err:
        check_finite([float("nan")], prefix="train")
    assert str(err.value) == "train.0: nan is not a finite number; write a finite number"
    with pytest.raises(ConfigError, match=r"^<root>: inf is not a finite number \(YAML"):
        check_finite(float("inf"))


@pytest.mark.reliability("configs")
def test_a_run_named_after_the_pipelines_own_folders_is_refused():
    # checkpoints/base/ holds the base model's checkpoints: a run "base" would nest its
    # seeds inside them and a new pretraining would move them aside.
    cfg = base()
    cfg["runs"]["base"] = cfg["runs"].pop("adloco")
    with pytest.raises(ConfigError) as err:
        check_run_names(cfg)
    message = str(err.value)
    assert message.startswith("runs.base: the name is the pipeline's own")
    assert "checkpoints/base/" in message and message.endswith("e.g. base-run")


@pytest.mark.parametrize(
    ("name", "suggestion"), [("ada.lr", "ada_lr"), ("-x", "x"), ("a b/c", "a_b_c"), ("..", "run")]
)
def test_a_run_name_dvc_would_misread_is_refused_with_a_suggestion(name, suggestion):
    cfg = base()
    cfg["runs"][name] = cfg["runs"].pop("adloco")
    with pytest.raises(ConfigError) as err:
        check_run_names(cfg)
    message = str(err.value)
    assert message.startswith(f"runs.{name}: a run name holds only letters, digits, '-' and '_'")
    assert message.endswith(f"rename the run, e.g. {suggestion}")
    for good in ("a", "A-1", "run_2", "0x"):
        check_run_names({"runs": {good: {}}})


@pytest.mark.parametrize(
    ("line", "named"),
    [
        ("  inner_lr: .nan ", "train.inner_lr: nan is not a finite number"),
        ("  inner_lr: -.inf ", "train.inner_lr: -inf is not a finite number"),
        ("  betas: [0.9, .inf]\n  inner_lr: 0.003 ", "train.betas.1: inf is not a finite number"),
    ],
)
def test_yaml_nan_and_infinity_are_refused(tmp_path, line, named):
    path = tmp_path / "c.yaml"
    text = PRESET.read_text()
    path.write_text(text.replace("  inner_lr: 0.003 ", line))
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert named in str(err.value)


@pytest.mark.parametrize(
    ("written", "number"), [("1e-4", 1e-4), ("3E5", 3e5), ("2.5e3", 2500.0), ("1e-05", 1e-5)]
)
def test_e_notation_yaml_1_1_reads_as_text_is_the_number_where_one_is_wanted(
    tmp_path, written, number
):
    """PyYAML reads these as strings; DVC's -S writes 1e-05. The schema wants a number there."""
    path = tmp_path / "c.yaml"
    text = PRESET.read_text()
    path.write_text(text.replace("  inner_lr: 0.003 ", f"  inner_lr: {written} "))
    assert yaml.safe_load(path.read_text())["train"]["inner_lr"] == written  # text to YAML 1.1
    assert load_config(path).train.inner_lr == number
    # The same from a mapping, as the Snakefile validates Snakemake's own reading of the file.
    mapping = yaml.safe_load(path.read_text())
    assert config_from_dict(mapping).train.inner_lr == number


def test_e_notation_where_text_is_wanted_stays_text(tmp_path):
    path = tmp_path / "c.yaml"
    text = PRESET.read_text()
    path.write_text(text.replace("experiment: test ", "experiment: '1e5' ", 1))
    assert load_config(path).experiment == "1e5"  # a name, not the number 100000.0
    # Unquoted, YAML 1.2 (DVC's too) reads the number: refused, saying to quote it.
    path.write_text(text.replace("experiment: test ", "experiment: 1e5 ", 1))
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == (
        "invalid configuration: experiment: 100000.0 is not of type 'string' (YAML reads the "
        "name as a number: write it in quotes)"
    )
