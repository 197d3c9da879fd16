"""The stages' declarations (adloco.stages) and dvc.yaml written from them (dvc_yaml.py).

tests/workflow/test_dvc.py checks, through DVC and Snakemake themselves, that
the generated dvc.yaml and the rules are one pipeline; this file checks the
generator against the declarations field by field, and that a stage declared
in one more module is a command and a stage of dvc.yaml with nothing else
edited.
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

import yaml

from adloco import cli
from adloco.stages import STAGES, snakemake_params, stage
from adloco.stages.declaration import Dvc, Key, Path_, Stage, arg
from adloco_workflow import dvc_yaml, rule_files

ROOT = Path(__file__).resolve().parents[2]


def generated() -> dict:
    return yaml.safe_load(dvc_yaml.text())


def body(stage: dict) -> dict:
    return stage["do"] if "do" in stage else stage


def test_the_checked_in_dvc_yaml_is_the_declarations_text():
    assert (ROOT / "dvc.yaml").read_text() == dvc_yaml.text()
    assert dvc_yaml.text().startswith("# Generated from the stages' declarations (src/adloco/")


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
    for declared in STAGES:
        if declared.dvc is None:
            assert declared.name not in stages
            continue
        cmd = body(stages[declared.name])["cmd"]
        assert cmd.count('"') == 2 * len(declared.dvc.args)
        assert shlex.split(cmd)[:2] == ["adloco", declared.name]


def test_dvcs_command_parses_with_the_stages_own_arguments():
    # Every flag dvc.yaml passes is one the stage's parser takes, and every
    # required argument is passed.
    parser = cli.build_parser()
    for declared in STAGES:
        if declared.dvc is None:
            continue
        args = parser.parse_args([declared.name, *(w for pair in declared.dvc.args for w in pair)])
        assert args._stage is declared
        passed = {flag for flag, _ in declared.dvc.args}
        required = {a.flags[0] for a in declared.arguments if a.required}
        assert required <= passed | {"--run"}, declared.name  # --run-name is --run


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


def test_the_snakefile_includes_each_stages_rule_file_in_the_stages_order():
    rules = ROOT / "workflow/rules"
    included = rule_files(ROOT / "workflow", STAGES)
    assert included == [
        "rules/prepare_corpus.smk", "rules/tokenize.smk", "rules/pretrain.smk",
        "rules/calibrate.smk", "rules/variance.smk", "rules/train.smk", "rules/report.smk",
    ]  # fmt: skip
    # Every rule file but the shared names is a stage's, and each declares its stage's params.
    assert sorted(p.name for p in rules.glob("*.smk")) == sorted(
        ["common.smk", *(Path(name).name for name in included)]
    )
    for declared in STAGES:
        path = rules / f"{declared.name.replace('-', '_')}.smk"
        if path.is_file():
            assert f'stage_params("{declared.name}"' in path.read_text(), path
    # A stage's module is named as its rule file.
    for declared in STAGES:
        assert declared.run.__module__ == f"adloco.stages.{declared.name.replace('-', '_')}"


def toy_run(args: argparse.Namespace) -> int:
    # What a stage's run does: typed values from the arguments, then its library.
    total = sum(args.count for _ in range(args.repeat))
    Path(args.out).write_text(f"{total}\n")
    return 0


TOY = Stage(
    name="toy",
    help="a stage declared in one module",
    description="Write --count times --repeat into --out.",
    arguments=(
        arg("--count", type=int, required=True, help="a number"),
        arg("--repeat", type=int, default=2, help="how many times (default: 2)"),
        arg("--out", required=True, help="output file"),
    ),
    run=toy_run,
    out_files=("out",),
    keys=(Key("seed"), Key("toy.count", note=("Its one setting.",))),
    dvc=Dvc(
        args=(("--count", "${toy.count}"), ("--out", "results/${experiment}/toy.txt")),
        deps=(Path_("config/toy"),),
        outs=(Path_("results/${experiment}/toy.txt", persist=True),),
    ),
)


def test_a_stage_declared_once_is_a_command_and_a_dvc_stage(tmp_path, capsys):
    with_toy = (*STAGES, TOY)
    assert stage("toy", with_toy) is TOY
    # The CLI: its help and its run, from the declaration alone.
    help_text = cli.build_parser(with_toy).format_help()
    assert "    toy " in help_text and "a stage declared in one module" in help_text
    out = tmp_path / "toy.txt"
    assert cli.main(["toy", "--count", "7", "--out", str(out)], with_toy) == 0
    assert out.read_text() == "14\n"  # 7 twice, by hand
    # Its output's folder is checked before it runs: here a file, not a folder.
    assert cli.main(["toy", "--count", "1", "--out", str(out / "toy.txt")], with_toy) == 1
    assert f"--out {out / 'toy.txt'}: its folder {out}" in capsys.readouterr().err
    assert out.read_text() == "14\n"
    # The Snakemake rules' settings param.
    assert snakemake_params(with_toy)["toy"] == ["seed", "toy.count"]
    assert snakemake_params(with_toy) == {**snakemake_params(), "toy": ["seed", "toy.count"]}
    # dvc.yaml: every stage as before, and the toy's after them.
    text = dvc_yaml.text(with_toy)
    before, toy_lines = text.split("\n  toy:\n")
    assert (ROOT / "dvc.yaml").read_text().startswith(before)
    assert toy_lines.split("\n\n")[0].splitlines() == [
        '    cmd: adloco toy --count "${toy.count}" --out "results/${experiment}/toy.txt"',
        "    deps:",
        "      - config/toy",
        "    params:",
        "      - params.yaml:",
        "          - seed",
        "          # Its one setting.",
        "          - toy.count",
        "    outs:",
        "      - results/${experiment}/toy.txt:",
        "          persist: true",
    ]
    parsed = yaml.safe_load(text)["stages"]["toy"]
    assert parsed["params"] == [{"params.yaml": ["seed", "toy.count"]}]
