"""Values refused where they are given, in one line naming the flag or key, before any work.

From a hostile review: a 300-character ``experiment`` (Snakemake's parse ended
in ``OSError: File name too long``), a figure label matplotlib reads as
mathematics (``--network '$\\foo{$=1,0.001'``: three lines of
``ParseFatalException`` after the work), ``--seed 99999999999999999999``
("Overflow when unpacking long long"), ``--seed -1`` and a huge value in
``seeds:`` (accepted), ``--dist-timeout-s nan`` (accepted).
"""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from adloco.cli import main
from adloco.config import ConfigError, load_config

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")
TEST = yaml.safe_load((ROOT / "config/test.yaml").read_text())

# (argv, the flag, what the line says after it)
FIGURES = "holds '$', and it labels the figures"
FLAGS = [
    (["report", "--network", "$\\foo{$=1,0.001"], "--network", FIGURES),
    (["regimes", "--roofline", "$^^$=0.001,8"], "--roofline", FIGURES),
    (["report", "--network", "a\nb=1,0.001"], "--network", "holds '\\n'"),
    (["train", "--seed", "99999999999999999999"], "--seed", "is not a seed from 0 to 4294967295"),
    (["train", "--seed", "-1"], "--seed", "-1 is not a seed from 0 to 4294967295"),
    (["train", "--dist-timeout-s", "nan"], "--dist-timeout-s", "a positive, finite number"),
    (["train", "--dist-timeout-s", "inf"], "--dist-timeout-s", "a positive, finite number"),
]  # fmt: skip


@pytest.mark.reliability("messages")
@pytest.mark.parametrize("argv, flag, says", FLAGS, ids=[" ".join(c[0]) for c in FLAGS])
def test_a_bad_value_is_refused_by_the_command_line(capsys, argv, flag, says):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "Exception" not in err
    line = err.splitlines()[-1]
    assert line.startswith(f"adloco {argv[0]}: error: argument {flag}: "), err
    assert says in line, line


def _with(tmp_path: Path, change) -> Path:
    raw = copy.deepcopy(TEST)
    change(raw)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _run_seeds(raw: dict) -> None:
    run = next(iter(raw["runs"]))
    raw["runs"][run]["seeds"] = [0, 2**64]


CONFIGS = [
    ("long experiment", lambda r: r.update(experiment="e" * 300),
     "experiment: a name of 300 bytes"),
    ("long run name", lambda r: r["runs"].update({"r" * 120: {"method": "ddp"}}),
     f"runs.{'r' * 120}: a name of 120 bytes"),
    ("huge seed", lambda r: r.update(seed=2**32), "seed: 4294967296 is not a seed"),
    ("huge seeds", lambda r: r.update(seeds=[0, 10**20]), "seeds.1: 100000000000000000000 is not"),
    ("huge run seeds", _run_seeds, ".seeds.1: 18446744073709551616 is not a seed"),
]  # fmt: skip


@pytest.mark.reliability("configs")
@pytest.mark.parametrize("case, change, says", CONFIGS, ids=[c[0] for c in CONFIGS])
def test_load_config_refuses_a_name_too_long_or_a_seed_too_large(tmp_path, case, change, says):
    with pytest.raises(ConfigError) as raised:
        load_config(_with(tmp_path, change))
    message = str(raised.value)
    assert "\n" not in message and says in message, message


@pytest.mark.reliability("configs")
@pytest.mark.workflow_cli
def test_snakemake_refuses_a_long_experiment_in_one_line(tmp_path):
    path = _with(tmp_path, lambda r: r.update(experiment="e" * 300))
    result = subprocess.run(
        [SNAKEMAKE, "-n", "--configfile", str(path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert "Traceback" not in output and "File name too long" not in output, output
    errors = [line for line in output.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and errors[0].startswith(f"snakemake: error: {path}: "), output
    assert "experiment: a name of 300 bytes" in errors[0]


@pytest.mark.reliability("messages")
@pytest.mark.parametrize("value", ["nan", "inf", "-5"])
def test_a_timeout_from_the_environment_that_is_no_duration_is_named(value):
    from adloco.engine import distributed

    with pytest.raises(ValueError) as raised:
        distributed.timeout_s(None, {distributed.TIMEOUT_ENV: value})
    message = str(raised.value)
    assert message.startswith(f"{distributed.TIMEOUT_ENV}: the process-group timeout must be ")
    assert message.endswith("give one such as 1800")
