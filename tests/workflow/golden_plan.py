"""The jobs each configuration plans (`snakemake -n -p`) and the CLI's help, as golden text.

    .venv/bin/python tests/workflow/golden_plan.py --write   # after a change meant to alter a rule

For every preset in ``CONFIGS`` the dry run's jobs are listed in a stable
form (rule, inputs, outputs, log, benchmark, resources and the shell
command; the run's date, job ids and reasons left out) under
tests/workflow/golden/<preset>.txt, and every stage's `adloco <stage> --help`
in cli-help.txt. A change that moves where a stage's
command, arguments or files are declared must leave these lists unchanged;
``test_golden_plan.py`` checks it.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parent / "golden"
CONFIGS = ["config", "test", "scale-4x", "small-memory", "from-scratch", "paper"]
KEPT = ("rule ", "    input:", "    output:", "    log:", "    benchmark:", "    resources:",
        "Shell command:", "    wildcards:")  # fmt: skip


def plan(preset: str) -> str:
    """The dry run's jobs for config/<preset>.yaml, one block each, sorted."""
    snakemake = Path(sys.executable).with_name("snakemake")
    with tempfile.TemporaryDirectory() as work:
        # The configurations name files relative to the working folder (a device's
        # record): a copy of config/ there, and no output of this checkout in sight.
        shutil.copytree(ROOT / "config", Path(work) / "config")
        result = subprocess.run(
            [str(snakemake), "-n", "-p", "-s", str(ROOT / "Snakefile"), "--directory", work,
             "--configfile", f"config/{preset}.yaml"],
            cwd=work, capture_output=True, text=True, check=True,
            env={**os.environ, "NO_COLOR": "1"},
        )  # fmt: skip
        text = (result.stdout + result.stderr).replace(work, "<work>")
    text = text.replace(str(ROOT), "<repo>")
    blocks, block = [], []
    for line in text.splitlines():
        if line.startswith("rule ") or line.startswith("localrule "):
            if block:
                blocks.append("\n".join(block))
            block = [line]
        elif block and line.startswith(KEPT):
            block.append(re.sub(r"tmpdir=[^,]+", "tmpdir=<tmp>", line))
    if block:
        blocks.append("\n".join(block))
    return "\n\n".join(sorted(blocks)) + "\n"


def cli_help() -> str:
    """`adloco --help` and each stage's (in the order of :data:`adloco.stages.STAGES`), at a
    fixed width: the arguments the CLI declares."""
    from adloco.stages import STAGES

    env = {**os.environ, "COLUMNS": "100"}
    texts = []
    for args in [[], *([stage.name] for stage in STAGES)]:
        result = subprocess.run([sys.executable, "-m", "adloco", *args, "--help"],
                                capture_output=True, text=True, check=True, env=env)  # fmt: skip
        texts.append(f"$ adloco {' '.join(args)} --help\n{result.stdout}")
    return "\n".join(texts)


def golden_texts() -> dict[str, str]:
    """File name under tests/workflow/golden/ -> its text now."""
    texts = {f"{preset}.txt": plan(preset) for preset in CONFIGS}
    texts["cli-help.txt"] = cli_help()
    return texts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite the golden lists")
    args = parser.parse_args()
    GOLDEN.mkdir(exist_ok=True)
    for name, text in golden_texts().items():
        path = GOLDEN / name
        if args.write:
            path.write_text(text)
            print(f"wrote {path}")
        else:
            print(f"{name}: {'same' if path.read_text() == text else 'DIFFERENT'}")


if __name__ == "__main__":
    main()
