"""The ``adloco`` command: its parsers need no library module, modules import at the top.

``adloco --help`` and ``adloco <stage> --help`` are checked in a fresh
interpreter: neither torch nor transformers may be imported by then. The
library modules import everything at the top; only a ``TYPE_CHECKING``
block may import elsewhere, and a stage's ``run`` (:mod:`adloco.stages`),
which imports its library when the stage runs.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from adloco import cli, stages
from adloco.core import paths

SRC = Path(cli.__file__).parent
HEAVY = ("torch", "transformers", "numpy", "pandas", "matplotlib", "datasets")


def modules_after(argv: list[str]) -> tuple[str, list[str]]:
    """(what ``adloco <argv>`` printed, heavy packages it imported), in a fresh interpreter."""
    code = (
        "import contextlib, io, json, sys\n"
        "from adloco.cli import main\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out):\n"
        "    try:\n"
        f"        main({argv!r})\n"
        "    except SystemExit:\n"
        "        pass\n"
        f"heavy = sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))\n"
        "print(json.dumps([out.getvalue(), heavy]))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    text, heavy = json.loads(result.stdout)
    return text, heavy


@pytest.mark.parametrize("argv", [["--help"], ["train", "--help"], ["report", "--help"]])
def test_help_imports_neither_torch_nor_transformers(argv):
    text, heavy = modules_after(argv)
    assert "usage: adloco" in text
    assert heavy == []


def test_every_stage_has_a_parser_and_a_run_function():
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.dest == "stage")
    assert list(sub.choices) == [stage.name for stage in stages.STAGES]
    assert len(set(sub.choices)) == len(stages.STAGES)  # one name, one stage
    for stage in stages.STAGES:
        assert callable(stage.run), stage.name
        assert sub.choices[stage.name].get_default("_stage") is stage
        # Each output argument names an argument of the stage.
        dests = {a.dest for a in sub.choices[stage.name]._actions}
        assert set(stage.out_dirs) | set(stage.out_files) <= dests, stage.name


def test_help_gives_the_paths_of_the_package():
    text, _ = modules_after(["train", "--help"])
    flat = " ".join(text.split())
    assert str(paths.run_dir("<experiment>", "<run>", "<seed>")) in flat
    assert str(paths.checkpoint_dir("<experiment>", "<run>", "<seed>")) in flat


def function_level_imports(path: Path) -> list[str]:
    """Imports inside functions or classes, outside ``if TYPE_CHECKING:``."""
    tree = ast.parse(path.read_text())
    found = []

    def visit(node: ast.AST, nested: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and getattr(child.test, "id", "") == "TYPE_CHECKING":
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)) and nested:
                found.append(f"{path.relative_to(SRC.parent)}:{child.lineno}")
            inner = nested or isinstance(
                child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
            )
            visit(child, inner)

    visit(tree, False)
    return found


def test_modules_import_at_the_top():
    # A stage's run imports its library (torch) when it runs: adloco.stages is
    # imported by the parser and by Snakemake.
    modules = [p for p in sorted(SRC.rglob("*.py")) if SRC / "stages" not in p.parents]
    found = [hit for path in modules for hit in function_level_imports(path)]
    assert found == []
    assert any(function_level_imports(p) for p in (SRC / "stages").glob("*.py"))


def test_only_the_stages_and_the_cli_see_argparse():
    seen = sorted(
        str(p.relative_to(SRC))
        for p in SRC.rglob("*.py")
        if "argparse" in imports_of(p) and SRC / "stages" not in p.parents
    )
    # adloco.config.generate is a developer's script (python -m), no stage.
    allowed = {"cli.py", "config/generate.py"}
    assert "cli.py" in seen and set(seen) <= allowed, seen


def imports_of(path: Path) -> set[str]:
    """The top-level names of the modules ``path`` imports."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize(
    "raised, status, words",
    [
        (KeyboardInterrupt, 130, "adloco report: interrupted; nothing partial was written"),
        (RecursionError, 1, "adloco report: error: an input file nests too deeply to read"),
    ],
)
def test_ctrl_c_and_a_deeply_nested_input_are_one_line(monkeypatch, capsys, raised, status, words):
    def run(args):
        raise raised()

    argv = ["report", "--config", "c.yaml", "--runs", "r", "--calibration", "c", "--variance", "v",
            "--out", "o"]  # fmt: skip
    raising = tuple(
        dataclasses.replace(s, run=run) if s.name == "report" else s for s in stages.STAGES
    )
    monkeypatch.setattr(cli, "check_outputs_writable", lambda stage, args: None)
    assert cli.main(argv, raising) == status
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(words)
    with pytest.raises(raised):  # -v shows the traceback
        cli.main(["-v", *argv], raising)
