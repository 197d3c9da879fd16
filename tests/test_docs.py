"""docs/DESIGN.md's module table matches the package: every module listed, nothing else."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src/adloco"


def modules() -> set[str]:
    """Every module of the package; a package's __init__.py only when it defines code."""
    found = set()
    for path in SRC.rglob("*.py"):
        tree = ast.parse(path.read_text())
        defines = any(isinstance(n, (ast.FunctionDef, ast.ClassDef)) for n in tree.body)
        if path.name != "__init__.py" or defines:
            found.add(path.relative_to(SRC).as_posix())
    return found


def design_table() -> list[str]:
    text = (ROOT / "docs/DESIGN.md").read_text()
    layout = text.split("## Layout", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `([\w/]+\.py)` \|", layout, flags=re.M)


def test_design_lists_every_module_once_and_only_modules():
    listed = design_table()
    assert len(listed) == len(set(listed))
    assert sorted(listed) == sorted(modules())
