"""dvc.yaml, written from the stages' declarations (:mod:`adloco.stages`).

``python workflow/lib/adloco_workflow/dvc_yaml.py`` writes dvc.yaml at the
repository root; ``--check`` only compares, and exits 1 naming the file when
the checked-in one differs from what the declarations give. Each stage runs its
``adloco`` command (through :data:`ADLOCO`) on params.yaml, every value
double-quoted (a path with spaces stays one argument), with its dependencies,
the keys of params.yaml it reads (no ``params`` entry for a stage that reads
none), and its outputs with DVC's flags.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the folder above and src/ first
    _LIB = Path(__file__).resolve().parents[1]
    sys.path[:0] = [str(_LIB), str(_LIB.parents[1] / "src")]

from adloco.core.io import write_text_atomic  # noqa: E402
from adloco.stages import STAGES  # noqa: E402
from adloco.stages.common import PARAMS_FILE  # noqa: E402
from adloco.stages.declaration import Path_, Stage  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
DVC_YAML = "dvc.yaml"
# Folded commands are cut at this column.
WIDTH = 92
# What runs a stage's `adloco` command: a shell script that finds `adloco` on
# PATH, else in the checkout's .venv, else says in one line how to install it.
ADLOCO = "workflow/bin/adloco"

HEADER = """\
# Generated from the stages' declarations (src/adloco/stages/), which the CLI
# and the Snakemake rules read too: edit a declaration, then run
# `python workflow/lib/adloco_workflow/dvc_yaml.py` (`make generated-check`
# fails while this file differs from what the declarations give).
# Values come from params.yaml (`vars`), DVC's own name for the parameters
# file: a plain copy of one preset with every default written out, made by
# `adloco dvc-params --preset config/<name>.yaml` (config/config.yaml in git)
# and tracked in git, so that DVC reads it at every revision and
# `dvc exp run -S key=value` edits it rather than a preset (docs/workflow.md).
# Runs, seeds and devices configured there become stages here and results go
# to results/<experiment>/. What a template cannot express: prepare-corpus is
# always a stage (every preset's source is offline-wiki), and so is pretrain
# (with model.source other than base, `adloco pretrain` only records in
# base.json that there is nothing to pretrain, and `--base` is ignored). Every
# device of cluster.devices is calibrated, as in Snakemake (a fixed max_batch
# skips only the max-batch search, not the step timing the simulated clock
# needs). `params` list the configuration keys each stage's command reads;
# editing others does not re-run it, so an experiment re-runs only the stages
# its settings reach. Every command is `workflow/bin/adloco ...`, run by DVC in
# a shell: the `adloco` on PATH (an activated environment), else the checkout's
# .venv/bin/adloco (`make setup`), else one line saying how to install it.
vars:
  - params.yaml

stages:
"""

FOOTER = """\
# `dvc plots show` / `dvc plots diff`: one line per run (the median over its
# seeds), coloured by run and dashed by revision (.dvc/plots/lines_by_run.json,
# since DVC's own templates colour by file and revision only).
plots:
"""

# The top-level plots: (name, x, x label).
PLOTS = (
    ("perplexity-by-tokens", "tokens_total", "tokens"),
    ("perplexity-by-simulated-time", "sim_time_s", "simulated time (s)"),
)


def _fill(text: str, stage: Stage) -> str:
    """``text`` with each wildcard of ``stage`` as DVC names it (``{run}`` -> ``${key}``)."""
    for wildcard, value in stage.dvc.wildcards.items():
        text = text.replace("{" + wildcard + "}", value)
    return text


def _command(stage: Stage, indent: str) -> list[str]:
    words = [f"{ADLOCO} {stage.name}"] + [f'{flag} "{value}"' for flag, value in stage.dvc.args]
    words = [_fill(w, stage) for w in words]
    line = " ".join(words)
    if len(indent) + len("cmd: ") + len(line) <= WIDTH:
        return [f"{indent}cmd: {line}"]
    lines, current = [], ""
    for word in words:
        if current and len(indent) + 2 + len(current) + 1 + len(word) > WIDTH:
            lines.append(current)
            current = word
        else:
            current = f"{current} {word}" if current else word
    lines.append(current)
    return [f"{indent}cmd: >-"] + [f"{indent}  {part}" for part in lines]


def _notes(note: tuple[str, ...], indent: str) -> list[str]:
    return [f"{indent}# {line}" for line in note]


def _paths(title: str, entries: tuple[Path_, ...], stage: Stage, indent: str) -> list[str]:
    if not entries:
        return []
    lines = [f"{indent}{title}:"]
    for entry in entries:
        lines += _notes(entry.note, indent + "  ")
        flags = ["persist: true"] * entry.persist + ["cache: false"] * (not entry.cache)
        path = _fill(entry.path, stage)
        lines.append(f"{indent}  - {path}:" if flags else f"{indent}  - {path}")
        lines += [f"{indent}      {flag}" for flag in flags]
    return lines


def _params(stage: Stage, indent: str) -> list[str]:
    # No key, no entry: DVC reads `- params.yaml:` alone as every key of the file,
    # and would re-run the stage on any edit.
    if not stage.keys:
        return []
    lines = [f"{indent}params:", f"{indent}  - {PARAMS_FILE}:"]
    for key in stage.keys:
        lines += _notes(key.note, indent + "      ")
        lines.append(f"{indent}      - {_fill(key.name, stage)}")
    return lines


def stage_lines(stage: Stage) -> list[str]:
    """The lines of ``stage`` under ``stages:``."""
    dvc = stage.dvc
    lines = _notes(dvc.note, "  ") + [f"  {stage.name}:"]
    indent = "    "
    if dvc.foreach:
        lines += [f"    foreach: {dvc.foreach}", "    do:"]
        indent = "      "
    lines += _command(stage, indent)
    lines += _paths("deps", dvc.deps, stage, indent)
    lines += _params(stage, indent)
    for title in ("outs", "metrics", "plots"):
        lines += _paths(title, getattr(dvc, title), stage, indent)
    return lines


def _plot_lines(stages: tuple[Stage, ...]) -> list[str]:
    report = next(s for s in stages if s.name == "report")
    curves = next(o.path for o in report.dvc.outs if o.path.endswith("/median_curves.csv"))
    lines = []
    for name, x, x_label in PLOTS:
        lines += [
            f"  - {name}:",
            "      template: lines_by_run",
            "      title: Validation perplexity, median over seeds",
            f"      x: {x}",
            f"      x_label: {x_label}",
            "      y:",
            f"        {curves}: val_perplexity",
            "      y_label: validation perplexity",
        ]
    return lines


def text(stages: tuple[Stage, ...] = STAGES) -> str:
    """dvc.yaml's exact text: a stage of it for each of ``stages`` that DVC runs."""
    blocks = ["\n".join(stage_lines(stage)) + "\n" for stage in stages if stage.dvc]
    return HEADER + "\n".join(blocks) + "\n" + FOOTER + "\n".join(_plot_lines(stages)) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    target = ROOT / DVC_YAML
    if args not in ([], ["--check"]):
        print("usage: dvc_yaml.py [--check]", file=sys.stderr)
        return 2
    if args == ["--check"]:
        same = target.is_file() and target.read_text() == text()
        if not same:
            print(f"{DVC_YAML} differs from the stages' declarations: run {Path(__file__).name}")
        return 0 if same else 1
    write_text_atomic(target, text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
