"""Hostile configuration files: an alias bomb, YAML 1.1's readings, whole floats, names with
line breaks. Each is refused in one line naming the file or key, or read as DVC reads it."""

from __future__ import annotations

import itertools
import math
import shutil
import signal
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

import adloco_workflow.plan as plan
from adloco.cli import main
from adloco.config import Config, ConfigError, load_config, validate
from adloco.config.yaml_file import dump_yaml, load_yaml_text, read_yaml
from adloco_workflow.snakemake_preflight import check_configfiles
from config_edits import PRESET, ROOT, base, set_key


@contextmanager
def within(seconds: int):
    """Fail the test (rather than hang it) when the block runs longer than ``seconds``."""

    def expired(*_):
        raise TimeoutError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def alias_bomb(levels: int = 75) -> str:
    """The "billion laughs": each level a list of 9 aliases of the one before (9**75 leaves)."""
    lines = ["experiment: bomb", "laugh00: &laugh00 [" + ", ".join(["ha"] * 9) + "]"]
    for level in range(1, levels):
        aliases = ", ".join([f"*laugh{level - 1:02d}"] * 9)
        lines.append(f"laugh{level:02d}: &laugh{level:02d} [{aliases}]")
    return "\n".join(lines) + "\n"


# The first alias: line 3 (the first level after laugh00), column 20 (after the 19
# characters of "laugh01: &laugh01 [").
BOMB_REFUSAL = (
    "line 3, column 20: an alias (*laugh00) repeats a value written elsewhere; a configuration "
    "file holds no aliases (nested ones expand without bound): write the value of &laugh00 out "
    "in full here"
)


@pytest.fixture
def work(tmp_path, monkeypatch):
    """A folder with the shipped presets, as `adloco dvc-params` runs in the repository."""
    shutil.copytree(ROOT / "config", tmp_path / "config")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def preset_with(work, old: str, new: str, name: str = "variant.yaml") -> str:
    """A copy of the test preset under config/ with ``old`` (a line's start) made ``new``."""
    text = PRESET.read_text()
    assert old in text
    (work / "config" / name).write_text(text.replace(old, new, 1))
    return f"config/{name}"


@pytest.mark.reliability("configs")
def test_an_alias_bomb_is_refused_at_its_first_alias_within_a_second(tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text(alias_bomb())
    assert len(path.read_bytes()) > 8000  # the 8 KB file of the sweep
    with within(1):
        with pytest.raises(ConfigError) as err:
            load_config(path)
        assert str(err.value) == f"{path}: {BOMB_REFUSAL}"
        # The Snakemake profiles' check, before Snakemake reads the file.
        with pytest.raises(SystemExit) as stop:
            check_configfiles(["--configfile", str(path)])
        assert str(stop.value) == f"snakemake: error: {path}: {BOMB_REFUSAL}"


@pytest.mark.reliability("configs")
def test_adloco_dvc_params_refuses_an_alias_bomb_in_one_line(work, capsys):
    (work / "config/bomb.yaml").write_text(alias_bomb())
    with within(1):
        assert main(["dvc-params", "--preset", "config/bomb.yaml"]) == 2
    assert not (work / "params.yaml").exists()  # nothing written
    assert capsys.readouterr().err == (
        f"adloco dvc-params: error: config/bomb.yaml: {BOMB_REFUSAL}\n"
    )


@pytest.mark.workflow_cli
@pytest.mark.reliability("configs")
@pytest.mark.parametrize("profile", [[], ["--workflow-profile", "none"]], ids=["profile", "none"])
def test_snakemake_refuses_an_alias_bomb_in_seconds(tmp_path, profile):
    # With the profiles, their check refuses the file before Snakemake reads it; without,
    # Snakemake's own reading (no expansion) is replaced by adloco's in the workflow.
    path = tmp_path / "bomb.yaml"
    path.write_text(alias_bomb())
    snakemake = str(Path(sys.executable).parent / "snakemake")
    result = subprocess.run(
        [snakemake, "-n", *profile, "--configfile", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert f"{path}: {BOMB_REFUSAL}\n" in output, output
    assert "Traceback" not in output


def test_an_anchor_alone_and_a_merge_of_a_written_mapping_are_read(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("a: &first {lr: 1}\nrun:\n  <<: {lr: 3, steps: 4}\n  lr: 5\n")
    assert read_yaml(path) == {"a": {"lr": 1}, "run": {"lr": 5, "steps": 4}}


@pytest.mark.reliability("configs")
def test_sexagesimal_1_0_is_text_and_refused_where_a_number_is_wanted(tmp_path):
    # YAML 1.1 reads 1:0 as 1*60 + 0; YAML 1.2 (DVC's `-S train.max_rounds=1:0` writes
    # it so, and DVC reads it back) as text.
    assert load_yaml_text("a: 1:0\nb: 1:0:0\nc: 190:20:30\n") == {
        "a": "1:0",
        "b": "1:0:0",
        "c": "190:20:30",
    }
    path = tmp_path / "c.yaml"
    path.write_text(PRESET.read_text().replace("  max_rounds: 3 ", "  max_rounds: 1:0 ", 1))
    message = (
        "invalid configuration: train.max_rounds: '1:0' is not of type 'integer' (YAML 1.2, "
        "which DVC and adloco read, takes 1:0 as text, not the base-60 number YAML 1.1 made "
        "of it: write the number in decimal)"
    )
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == message
    # The Snakemake workflow reads the file as the adloco commands do: Snakemake's own
    # YAML 1.1 reading (60) is replaced by it before anything is planned.
    with pytest.raises(plan.PlanError) as err:
        plan.settings(str(path), plan.read_config(str(path)))
    assert str(err.value) == f"{path}: {message}"
    with pytest.raises(SystemExit) as stop:
        check_configfiles(["--configfile", str(path)])
    assert str(stop.value) == f"snakemake: error: {path}: {message}"


@pytest.mark.reliability("configs")
def test_adloco_dvc_params_refuses_1_0_naming_the_key(work, capsys):
    preset = preset_with(work, "  max_rounds: 3 ", "  max_rounds: 1:0 ")
    assert main(["dvc-params", "--preset", preset]) == 2
    assert not (work / "params.yaml").exists()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(
        f"adloco dvc-params: error: {preset}: invalid configuration: train.max_rounds: '1:0' "
        "is not of type 'integer' (YAML 1.2, "
    )


@pytest.mark.reliability("configs")
@pytest.mark.parametrize("word", ["yes", "no", "on", "off", "Yes", "OFF", "y", "n"])
def test_yes_no_on_off_are_text(tmp_path, word):
    path = tmp_path / "c.yaml"
    text = PRESET.read_text()
    path.write_text(text.replace("experiment: test ", f"experiment: {word} ", 1))
    assert load_config(path).experiment == word  # a name, not a boolean
    # Where a boolean is wanted, refused, saying which to write.
    path.write_text(text.replace("  nesterov: true ", f"  nesterov: {word} ", 1))
    meant = "true" if word.lower() in ("yes", "on", "y") else "false"
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == (
        f"invalid configuration: train.nesterov: '{word}' is not of type 'boolean' (YAML 1.2, "
        f"which DVC and adloco read, takes {word} as text: write {meant})"
    )


def _typed(value):
    """``value`` with the type of every leaf beside it: 2 and 2.0 differ."""
    if isinstance(value, dict):
        return {key: _typed(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_typed(item) for item in value]
    return (type(value).__name__, value)


def _leaves(node, prefix=""):
    """(dotted key, value) of every value that is no mapping; list items by index."""
    items = node.items() if isinstance(node, dict) else enumerate(node)
    for key, value in items:
        if isinstance(value, (dict, list)):
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


FILLED = validate(base())
# Every int of the test preset with its defaults filled: each key the schema says is an
# integer, and number keys that hold a whole number.
INT_KEYS = [key for key, value in _leaves(FILLED) if type(value) is int]


def _set(config: dict, key: str, value) -> dict:
    """``config`` with its dotted ``key`` set to ``value`` (list items by index)."""
    *parents, leaf = key.split(".")
    node = config
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    node[int(leaf) if isinstance(node, list) else leaf] = value
    return config


def _refused(key: str, value: float) -> bool:
    """Whether the configuration with ``key`` set to ``value`` is refused, naming the key."""
    try:
        validate(_set(base(), key, value))
    except ConfigError as err:
        return f"{key}: {value}" in str(err)
    return False


def test_the_integer_keys_include_those_the_sweep_met():
    integers = {key for key in INT_KEYS if _refused(key, dict(_leaves(FILLED))[key] + 0.5)}
    named = {"seed", "train.inner_steps", "train.max_rounds", "data.seq_len_tokens"}
    assert named | {"calibration.steps_per_trial"} <= integers
    assert len(integers) >= 20


@pytest.mark.reliability("configs")
@pytest.mark.parametrize("key", INT_KEYS)
def test_a_whole_float_at_an_integer_key_is_read_as_the_int(key):
    value = dict(_leaves(FILLED))[key]
    config = validate(_set(base(), key, float(value)))
    integer = _refused(key, value + 0.5)  # the schema wants an integer here
    if key.startswith("runs."):  # a run's override, read merged with train
        _, run, field = key.split(".")
        read = getattr(Config.from_dict(config).run(run), field)
        assert _typed(read) == (("int", value) if integer else ("float", float(value)))
    elif integer:
        assert _typed(config) == _typed(FILLED)
    else:  # a number: the float stays
        assert _typed(dict(_leaves(config))[key]) == ("float", float(value))


@pytest.mark.reliability("configs")
def test_a_whole_float_in_a_run_and_from_dvc_s_reaches_training_as_an_int(tmp_path):
    # `dvc exp run -S train.inner_steps=2.0` writes 2.0; a run's own override too.
    config = base()
    run = next(iter(config["runs"]))
    config["train"]["inner_steps"] = 2.0
    config["runs"][run]["max_rounds"] = 4.0
    config["seeds"] = [0.0, 1.0]
    path = tmp_path / "c.yaml"
    path.write_text(dump_yaml(config, sort_keys=False))
    loaded = load_config(path)
    settings = loaded.run(run)
    assert _typed([settings.inner_steps, settings.max_rounds]) == [("int", 2), ("int", 4)]
    assert _typed(list(loaded.run_seeds(run))) == [("int", 0), ("int", 1)]


@pytest.mark.reliability("configs")
def test_what_dvc_s_writes_is_what_the_stages_read(work):
    hydra = pytest.importorskip("dvc.utils.hydra")
    assert main(["dvc-params", "--preset", "config/test.yaml"]) == 0
    params = work / "params.yaml"
    written = params.read_text()
    hydra.apply_overrides(str(params), ["train.inner_steps=2.0", "experiment=yes"])
    loaded = load_config(params)
    assert (loaded.experiment, _typed(loaded.train.inner_steps)) == ("yes", ("int", 2))
    params.write_text(written)
    hydra.apply_overrides(str(params), ["train.max_rounds=1:0"])
    assert "  max_rounds: 1:0\n" in params.read_text()  # as DVC records it
    with pytest.raises(ConfigError, match=r"train\.max_rounds: '1:0' is not of type 'integer'"):
        load_config(params)


NAMES = ["experiment", "data.dataset", "cluster.devices.0.name"]


@pytest.mark.reliability("configs")
@pytest.mark.parametrize("key", NAMES)
@pytest.mark.parametrize(
    ("suffix", "where"),
    [("\n", "'\\n' at its end"), (" x", "' ' at character 5"), ("\t", "'\\t' at its end")],
    ids=["line break at the end", "space", "tab"],
)
def test_a_name_with_whitespace_is_refused_naming_the_key(tmp_path, key, suffix, where):
    name = "good" + suffix
    path = tmp_path / "c.yaml"
    path.write_text(dump_yaml(set_key(base(), key, name), sort_keys=False))
    assert read_yaml(path) == set_key(base(), key, name)  # the file holds it
    with pytest.raises(ConfigError) as err:
        load_config(path)
    message = str(err.value)
    assert message.startswith(f"invalid configuration: {key}: {name!r} does not match '^")
    assert message.endswith(
        f"(it holds {where}: a name holds no whitespace or control character, since it "
        "names folders and files; remove it)"
    )
    assert "\n" not in message
    with pytest.raises(SystemExit) as stop:
        check_configfiles(["--configfile", str(path)])
    assert f"{key}: {name!r} does not match" in str(stop.value)


@pytest.mark.parametrize("key", NAMES)
def test_a_name_with_a_control_character_is_refused(key):
    with pytest.raises(ConfigError, match=rf"{key}: 'go\\x07od' does not match .* at character 3"):
        validate(set_key(base(), key, "go\x07od"))
    validate(set_key(base(), key, "good"))


def test_a_run_name_ending_in_a_line_break_is_refused():
    config = base()
    config["runs"]["fast\n"] = config["runs"].pop(next(iter(config["runs"])))
    with pytest.raises(ConfigError, match=r"^runs\.fast\n: a run name holds only letters"):
        validate(config)


# Plain values over the characters numbers and booleans are written with.
SCALARS = [
    "".join(chars) for n in (1, 2, 3) for chars in itertools.product("01789_-+.eExob:", repeat=n)
] + ["yes", "No", "on", "OFF", "true", "False", "TRUE", "null", "~", ".inf", "-.Inf", ".NaN"]


def test_plain_values_read_as_dvc_reads_them():
    # DVC reads params.yaml with ruamel.yaml's YAML 1.2: every value the same, of one type.
    dvc_yaml = pytest.importorskip("dvc.utils.serialize")
    differ = []
    for text in SCALARS:
        try:
            theirs = dvc_yaml.parse_yaml(f"k: {text}\n", "params.yaml")["k"]
        except Exception:  # noqa: BLE001 (DVC's error, or ruamel's ValueError on 0x_)
            theirs = "refused"
        try:
            ours = load_yaml_text(f"k: {text}\n")["k"]
        except Exception:  # noqa: BLE001 (any refusal)
            ours = "refused"
        same = _typed(ours) == _typed(theirs) or (
            isinstance(ours, float) and isinstance(theirs, float) and math.isnan(ours + theirs)
        )
        if not same:
            differ.append((text, ours, theirs))
    assert differ == []
    assert len(SCALARS) > 3000


def test_what_the_configuration_dumper_writes_is_read_back_the_same():
    values = ["1e5", "yes", "1:0", "", None, "0o17", "017", "1_000", "2024-01-01", "true", "=", 2.0]
    values += [1e-05, math.inf, True, 12, "-.5", "<<", "name\n", "0x1F"]
    mapping = {f"k{index}": value for index, value in enumerate(values)}
    shared = {"lr": 1}
    mapping["twice"] = [shared, shared]  # written out twice: an alias would be refused
    assert _typed(load_yaml_text(dump_yaml(mapping))) == _typed(mapping)
    # Quoted where YAML 1.2 would read another type, so DVC reads text too.
    assert "k0: '1e5'\n" in dump_yaml(mapping) and "k8: '2024-01-01'\n" in dump_yaml(mapping)


def test_an_explicit_tag_on_other_text_is_named(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("experiment: x\nseed: !!int 1:0\n")
    with pytest.raises(ConfigError) as err:
        read_yaml(path)
    assert (
        str(err.value) == f"{path}: not valid YAML: line 2, column 7: '1:0' is no int in YAML 1.2"
    )
    path.write_text("experiment: x\nseed: !!int 0x1F\nflag: !!bool TRUE\nlr: !!float 1\n")
    assert _typed(read_yaml(path)) == _typed(
        {"experiment": "x", "seed": 31, "flag": True, "lr": 1.0}
    )


def test_every_shipped_preset_reads_as_yaml_1_1_read_it():
    # No preset holds an alias, or a value YAML 1.1 and 1.2 read apart.
    import yaml

    for path in sorted((ROOT / "config").glob("*.yaml")):
        assert _typed(read_yaml(path)) == _typed(yaml.safe_load(path.read_text())), path
