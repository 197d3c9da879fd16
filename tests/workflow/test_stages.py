"""The stages' declarations (adloco.stages) and dvc.yaml written from them (dvc_yaml.py).

tests/workflow/test_dvc.py checks, through DVC and Snakemake themselves, that
the generated dvc.yaml and the rules are one pipeline; this file checks the
generator against the declarations field by field, that a stage declared in
one more module is a command and a stage of dvc.yaml with nothing else
edited, and that following docs/DESIGN.md's "Add a stage" in a copy of the
checkout gives a workflow Snakemake parses and plans, a stage without
configuration keys included. Every list of stages here comes from
:data:`adloco.stages.STAGES`; a step of the recipe left out fails a test
that names it.
"""

from __future__ import annotations

import argparse
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from adloco import cli
from adloco.stages import STAGES, snakemake_params, stage
from adloco.stages.declaration import Dvc, Key, Path_, Stage, arg
from adloco_workflow import dvc_yaml, rule_files
from adloco_workflow.plan import Plan

ROOT = Path(__file__).resolve().parents[2]
STAGES_DIR = ROOT / "src/adloco/stages"
GOLDEN = Path(__file__).resolve().parent / "golden"
# The stages dvc.yaml runs, in the stages' order: those Snakemake runs too.
DVC_STAGES = [s for s in STAGES if s.dvc]
# What runs each stage's adloco command in dvc.yaml (test_dvc.py runs it).
ADLOCO = "workflow/bin/adloco"


def rule_name(name: str) -> str:
    """A stage's rule (and rule file, and module) name: ``-`` written ``_``."""
    return name.replace("-", "_")


def generated() -> dict:
    return yaml.safe_load(dvc_yaml.text())


def body(stage: dict) -> dict:
    return stage["do"] if "do" in stage else stage


def test_the_checked_in_dvc_yaml_is_the_declarations_text():
    assert (ROOT / "dvc.yaml").read_text() == dvc_yaml.text(), (
        "dvc.yaml differs from the stages' declarations: run "
        "python workflow/lib/adloco_workflow/dvc_yaml.py"
    )
    assert dvc_yaml.text().startswith("# Generated from the stages' declarations (src/adloco/")


def test_every_stage_runs_its_adloco_command_with_each_argument_quoted():
    stages = generated()["stages"]
    assert list(stages) == [s.name for s in DVC_STAGES]
    # The pipeline's stages DVC runs; the others (`adloco regimes`, the DVC helpers) are
    # commands alone.
    assert {"prepare-corpus", "train", "report"} <= set(stages)
    assert not {"regimes", "dvc-params", "dvc-check"} & set(stages)
    train = body(stages["train"])["cmd"]
    # A folded command reads as one line; each value is one argument, double-quoted.
    assert "\n" not in train
    assert shlex.split(train)[:8] == [
        ADLOCO, "train", "--config", "params.yaml", "--run-name", "${key}", "--seed", "all"
    ]  # fmt: skip
    assert '--out "results/${experiment}/runs/${key}"' in train
    for declared in STAGES:
        if declared.dvc is None:
            assert declared.name not in stages
            continue
        cmd = body(stages[declared.name])["cmd"]
        assert cmd.count('"') == 2 * len(declared.dvc.args)
        assert shlex.split(cmd)[:2] == [ADLOCO, declared.name]


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
    every = snakemake_params()
    # Every stage has its entry, one without keys an empty one (its rule's stage_params).
    assert list(every) == [s.name for s in STAGES]
    assert every["regimes"] == [] and every["train"][0] == "seed"
    for declared in DVC_STAGES:
        name, keys = declared.name, every[declared.name]
        expected = [k.replace("{run}", "${key}") for k in keys]
        if name == "train":
            expected.insert(1, "seeds")  # DVC's stage trains every seed of its run
        if not declared.keys:
            assert "params" not in body(stages[name]), name
            continue
        (params,) = body(stages[name])["params"]
        assert params == {"params.yaml": expected}


def test_dvc_flags_of_each_output():
    stages = generated()["stages"]

    def flagged(name: str, flag: str) -> list[str]:
        outs = [o for o in body(stages[name]).get("outs", []) if isinstance(o, dict)]
        return [path for out in outs for path, flags in out.items() if flag in flags]

    persist = {name: flagged(name, "persist") for name in stages}
    assert list(persist) == [s.name for s in DVC_STAGES]
    # Only the folders a stage resumes from, or a user's corpus, persist.
    assert {name: paths for name, paths in persist.items() if paths} == {
        "prepare-corpus": ["${data.raw_dir}"],
        "pretrain": ["results/${experiment}/base", "results/${experiment}/checkpoints/base"],
        "train": ["results/${experiment}/runs/${key}", "results/${experiment}/checkpoints/${key}"],
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
    # A stage dvc.yaml runs is a rule Snakemake runs, and no other: one pipeline.
    expected = [f"rules/{rule_name(s.name)}.smk" for s in DVC_STAGES]
    missing = [name for name in expected if name not in included]
    assert not missing, (
        f"no workflow/{', workflow/'.join(missing)}: a stage that declares a Dvc is a "
        "Snakemake rule too (docs/DESIGN.md, Add a stage)"
    )
    assert included == expected, "a rule file of a stage without a Dvc: declare one"
    # Every rule file but the shared names is a stage's, and each declares its stage's params.
    stray = sorted({p.name for p in rules.glob("*.smk")} - {"common.smk"} - {
        Path(name).name for name in included})  # fmt: skip
    assert not stray, f"workflow/rules/{stray[0]} is no stage's: no such stage in STAGES"
    for declared in STAGES:
        path = rules / f"{rule_name(declared.name)}.smk"
        if path.is_file():
            assert f'stage_params("{declared.name}"' in path.read_text(), (
                f'{path.relative_to(ROOT)}: its rule needs settings=stage_params("{declared.name}")'
            )
    # A stage's module is named as its rule file.
    for declared in STAGES:
        assert declared.run.__module__ == f"adloco.stages.{rule_name(declared.name)}"


def test_every_stage_module_is_listed_in_stages():
    listed = {s.run.__module__ for s in STAGES}
    for path in sorted(STAGES_DIR.glob("*.py")):
        if path.name in ("__init__.py", "common.py", "declaration.py"):
            continue
        module = f"adloco.stages.{path.stem}"
        assert re.search(r"^STAGE = Stage\(", path.read_text(), flags=re.M), (
            f"src/adloco/stages/{path.name} declares no STAGE: a module of stages/ is one stage"
        )
        assert module in listed, (
            f"src/adloco/stages/{path.name} declares a STAGE that STAGES in "
            "src/adloco/stages/__init__.py does not list: import it there and add its STAGE"
        )


def planned_rules() -> set[str]:
    """Every rule some preset's dry run plans (tests/workflow/golden/, test_golden_plan.py)."""
    found = set()
    for path in GOLDEN.glob("*.txt"):
        found |= set(re.findall(r"^(?:local)?rule ([\w-]+):$", path.read_text(), flags=re.M))
    return found


def test_every_stages_rule_is_planned_by_a_preset():
    # A rule runs only when a later rule's input, or rule all, names an output of it.
    planned = planned_rules()
    assert {"tokenize", "report"} <= planned
    for declared in STAGES:
        rule = rule_name(declared.name)
        if not (ROOT / f"workflow/rules/{rule}.smk").is_file():
            continue
        # train: one rule per run (train_<run>) when its seeds train as one job.
        assert any(p == rule or p.startswith(f"{rule}_") for p in planned), (
            f"rule {rule} is in no preset's dry run (tests/workflow/golden/, rewritten by "
            "tests/workflow/golden_plan.py --write): Snakemake plans a rule only when a "
            "later rule's input or rule all (workflow/Snakefile) names one of its outputs"
        )


def toy_run(args: argparse.Namespace) -> int:
    # A toy without a library, so without a request: it reads its arguments itself.
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
        "    cmd: >-",
        f'      {ADLOCO} toy --count "${{toy.count}}" --out "results/${{experiment}}/toy.txt"',
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


KEYLESS = Stage(
    name="toy-keyless",
    help="a stage that reads no configuration key",
    description="Write --count into --out.",
    arguments=(
        arg("--count", type=int, required=True, help="a number"),
        arg("--out", required=True, help="output file"),
    ),
    run=toy_run,
    out_files=("out",),
    dvc=Dvc(args=(("--count", "3"), ("--out", "results/${experiment}/toy.txt"))),
)


def test_a_stage_without_keys_has_empty_params_and_no_dvc_params_entry():
    with_toy = (*STAGES, KEYLESS)
    # Its rule's settings param: the Plan's stage_params is an empty mapping, not a KeyError.
    every = snakemake_params(with_toy)
    assert every["toy-keyless"] == []
    plan = SimpleNamespace(STAGE_PARAMS=every, config={"seed": 0, "data": {"dataset": "d"}})
    assert Plan.stage_params(plan, "toy-keyless") == {}
    assert Plan.stage_params(plan, "tokenize") == {"seed": 0, "data": {"dataset": "d"}}
    # dvc.yaml: no `params.yaml:` entry, which DVC would read as every key of the file.
    text = dvc_yaml.text(with_toy)
    toy_lines = text.split("\n  toy-keyless:\n")[1].split("\n\n")[0].splitlines()
    assert toy_lines == [
        f'    cmd: {ADLOCO} toy-keyless --count "3" --out "results/${{experiment}}/toy.txt"'
    ]
    assert "params" not in yaml.safe_load(text)["stages"]["toy-keyless"]


# docs/DESIGN.md's "Add a stage", followed in a copy of the checkout: the stage's
# module, its line in STAGES, its rule file.
TOY_MODULE = '''"""``adloco toy-count``: the tokenized data's files, counted."""

import argparse

from adloco.stages.common import TOKENIZED
from adloco.stages.declaration import Dvc, Path_, Stage, arg


def run(args: argparse.Namespace) -> int:
    return 0


STAGE = Stage(
    name="toy-count",
    help="count the tokenized data's files",
    description="Count the files of --data into --out.",
    arguments=(
        arg("--data", required=True, help="tokenized data folder"),
        arg("--out", required=True, help="output file"),
    ),
    run=run,
    out_files=("out",),
    dvc=Dvc(
        args=(("--data", TOKENIZED), ("--out", "results/${experiment}/toy-count.txt")),
        deps=(Path_(TOKENIZED),),
        outs=(Path_("results/${experiment}/toy-count.txt"),),
    ),
)
'''
TOY_RULE = """rule toy_count:
    input:
        manifest=MANIFEST,
    output:
        counted=f"results/{EXPERIMENT}/toy-count.txt",
    params:
        settings=stage_params("toy-count"),
        data=input_folder("manifest"),
    shell:
        "adloco toy-count --data {params.data:q} --out {output.counted:q}"
"""


def add_toy_stage(root: Path) -> None:
    """The recipe's files in the checkout copy ``root``."""
    stages = root / "src/adloco/stages"
    (stages / "toy_count.py").write_text(TOY_MODULE)
    init = (stages / "__init__.py").read_text()
    declared = init.index("STAGES: tuple[Stage, ...] = (")
    end = init.index("\n)\n", declared)
    init = init[:end] + "\n    toy_count.STAGE," + init[end:]
    init = init.replace(
        "from adloco.stages.declaration import Stage",
        "from adloco.stages import toy_count\nfrom adloco.stages.declaration import Stage",
    )
    (stages / "__init__.py").write_text(init)
    (root / "workflow/rules/toy_count.smk").write_text(TOY_RULE)


@pytest.mark.workflow_cli
def test_a_stage_added_as_the_recipe_says_parses_and_plans(tmp_path):
    copy = tmp_path / "checkout"
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for folder in ("src", "workflow", "config", "profiles"):
        shutil.copytree(ROOT / folder, copy / folder, ignore=ignore)
    for name in ("Snakefile", "dvc.yaml"):
        shutil.copy(ROOT / name, copy / name)
    add_toy_stage(copy)
    # Snakemake parses the workflow (the toy's stage_params, with no keys) and plans the
    # toy's job with the jobs it needs, from the copy's src/ (put first by the Snakefile).
    snakemake = Path(sys.executable).with_name("snakemake")
    result = subprocess.run(
        [str(snakemake), "-n", "-p", "results/test/toy-count.txt",
         "--configfile", "config/test.yaml"],
        cwd=copy, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    jobs = set(re.findall(r"^(?:local)?rule (\w+):$", out, flags=re.M))
    assert jobs == {"toy_count", "tokenize", "prepare_corpus"}, out
    command = "adloco toy-count --data data/tokenized/test-tiny --out results/test/toy-count.txt"
    assert command in out
    # The DVC writer, run as the recipe says: the toy's stage last (its place in STAGES),
    # without params, every other stage as before.
    writer = copy / "workflow/lib/adloco_workflow/dvc_yaml.py"
    subprocess.run([sys.executable, str(writer)], cwd=copy, check=True, timeout=60)
    text = (copy / "dvc.yaml").read_text()
    toy = yaml.safe_load(text)["stages"]["toy-count"]
    assert toy == {
        "cmd": f'{ADLOCO} toy-count --data "data/tokenized/${{data.dataset}}" '
        '--out "results/${experiment}/toy-count.txt"',
        "deps": ["data/tokenized/${data.dataset}"],
        "outs": ["results/${experiment}/toy-count.txt"],
    }
    block = "  toy-count:\n" + text.split("\n  toy-count:\n")[1].split("\n\n")[0] + "\n\n"
    assert text.replace(block, "") == dvc_yaml.text()
    assert text.index("\n  report:\n") < text.index(block)
