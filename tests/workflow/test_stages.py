"""The stage table (adloco_workflow.stages) and dvc.yaml written from it (adloco_workflow.dvc_yaml).

tests/workflow/test_dvc.py checks, through DVC and Snakemake themselves, that
the generated dvc.yaml and the rules are one pipeline; this file checks the
generator against the table field by field.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import yaml

from adloco_workflow import dvc_yaml
from adloco_workflow.stages import STAGES, snakemake_params

ROOT = Path(__file__).resolve().parents[2]


def generated() -> dict:
    return yaml.safe_load(dvc_yaml.text())


def body(stage: dict) -> dict:
    return stage["do"] if "do" in stage else stage


def test_the_checked_in_dvc_yaml_is_the_tables_text():
    assert (ROOT / "dvc.yaml").read_text() == dvc_yaml.text()
    assert dvc_yaml.text().startswith("# Generated from workflow/lib/adloco_workflow/stages.py")


def test_every_stage_runs_its_adloco_command_with_each_argument_quoted():
    stages = generated()["stages"]
    assert list(stages) == [
        "prepare-corpus", "tokenize", "pretrain", "calibrate", "variance", "train", "report"
    ]  # fmt: skip
    train = body(stages["train"])["cmd"]
    # A folded command reads as one line; each value is one argument, double-quoted.
    assert "\n" not in train
    assert shlex.split(train)[:8] == [
        "adloco", "train", "--config", "params.yaml", "--run-name", "${key}", "--seed", "all"
    ]  # fmt: skip
    assert '--out "results/${experiment}/runs/${key}"' in train
    for table in STAGES:
        cmd = body(stages[table.name])["cmd"]
        assert cmd.count('"') == 2 * len(table.args)
        assert shlex.split(cmd)[:2] == ["adloco", table.name]


def test_params_are_the_snakemake_keys_plus_the_seeds_of_a_run():
    stages = generated()["stages"]
    for name, keys in snakemake_params().items():
        (params,) = body(stages[name])["params"]
        expected = [k.replace("{run}", "${key}") for k in keys]
        if name == "train":
            expected.insert(1, "seeds")  # DVC's stage trains every seed of its run
        assert params == {"params.yaml": expected}


def test_dvc_flags_of_each_output():
    stages = generated()["stages"]

    def flagged(name: str, flag: str) -> list[str]:
        outs = [o for o in body(stages[name]).get("outs", []) if isinstance(o, dict)]
        return [path for out in outs for path, flags in out.items() if flag in flags]

    persist = {name: flagged(name, "persist") for name in stages}
    assert persist == {
        "prepare-corpus": ["${data.raw_dir}"],
        "tokenize": [],
        "pretrain": ["results/${experiment}/base", "results/${experiment}/checkpoints/base"],
        "calibrate": [],
        "variance": [],
        "train": ["results/${experiment}/runs/${key}", "results/${experiment}/checkpoints/${key}"],
        "report": [],
    }
    report = body(stages["report"])
    assert flagged("report", "cache") == ["results/${experiment}/report/median_curves.csv"]
    assert report["metrics"] == [{"results/${experiment}/report/metrics.json": {"cache": False}}]
    assert body(stages["calibrate"])["outs"] == [
        "results/${experiment}/calibration/${item.name}.json"
    ]
    assert stages["calibrate"]["foreach"] == "${cluster.devices}"
    assert stages["train"]["foreach"] == "${runs}"
