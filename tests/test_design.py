"""docs/DESIGN.md against the code: a round's order, the direction of the imports, the files
the recipes name and that the engine names no method."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DESIGN = (ROOT / "docs/DESIGN.md").read_text()


def section(title: str) -> str:
    return DESIGN.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def imports(tree: ast.AST) -> set[str]:
    """The modules a tree imports (``from a import b``: ``a`` and ``a.b``)."""
    mods = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            mods |= {a.name for a in n.names}
        elif isinstance(n, ast.ImportFrom) and n.module and n.level == 0:
            mods |= {n.module, *(f"{n.module}.{a.name}" for a in n.names)}
    return mods


def test_a_round_calls_its_steps_in_the_documented_order():
    documented = re.findall(r"^\d\. `(\w+)`", section("A round, in order"), flags=re.M)
    assert documented == ["allocate", "plan", "train", "test", "merge", "record"]
    tree = ast.parse((ROOT / "src/adloco/engine/loop.py").read_text())
    (loop,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "RoundLoop"]
    (run_round,) = [n for n in loop.body if getattr(n, "name", None) == "run_round"]
    calls = [
        n.func.attr
        for n in sorted(
            (n for n in ast.walk(run_round) if isinstance(n, ast.Call)),
            key=lambda n: (n.lineno, n.col_offset),
        )
        if isinstance(n.func, ast.Attribute)
        and isinstance(n.func.value, ast.Name)
        and n.func.value.id == "self"
        and n.func.attr in documented
    ]
    firsts = sorted(documented, key=lambda name: (calls.index(name), name))
    assert firsts == documented, calls


def package_imports(sub: str) -> dict[str, set[str]]:
    return {
        p.relative_to(ROOT / "src/adloco").as_posix(): imports(ast.parse(p.read_text()))
        for p in sorted((ROOT / "src/adloco" / sub).rglob("*.py"))
    }


STAGE_MODULES = (
    "adloco.data.corpus", "adloco.data.tokenize", "adloco.model.pretrain",
    "adloco.calibrate.device", "adloco.variance", "adloco.train_run", "adloco.report",
    "adloco.cli", "adloco.stages",
)  # fmt: skip


def test_the_imports_point_down_as_the_dependencies_section_says():
    text = section("Dependencies")
    assert "`engine/` imports no stage module" in " ".join(text.split())
    for module, mods in package_imports("engine").items():
        stages = {m for m in mods for s in STAGE_MODULES if m == s or m.startswith(s + ".")}
        assert not stages, f"{module} imports {stages}"
    assert "`algo/` imports\nno other module of the package but `model/llama.py`'s loss" in text
    for module, mods in package_imports("algo").items():
        outside = {m for m in mods if m.startswith("adloco") and not m.startswith("adloco.algo")}
        allowed = (
            {"adloco.model.llama", "adloco.model.llama.causal_lm_loss"}
            if module == "algo/exact.py"
            else set()
        )
        assert outside <= allowed, f"{module} imports {outside - allowed}"
        assert not {m for m in mods if m.startswith("torch.distributed")}, module
    for module, mods in package_imports("config").items():
        assert not {m for m in mods if m == "torch" or m.startswith("torch.")}, module


def test_every_file_a_recipe_names_exists():
    recipes = section("Recipes")
    named = set(re.findall(r"`((?:src|tests|workflow|docs|config)/[\w/.<>-]+)`", recipes))
    named |= {f for f in re.findall(r"`([\w.-]+\.(?:yaml|md))`", recipes)}
    concrete = sorted(n for n in named if "<" not in n)
    assert len(concrete) > 12  # the parser finds the names (17 today)
    missing = [n for n in concrete if not (ROOT / n).exists() and not (ROOT / "docs" / n).exists()]
    assert not missing, missing
    # A name the recipes say a file holds is there.
    holds = {
        "src/adloco/algo/batch_tests.py": "REGISTRY",
        "src/adloco/config/runs.py": "METHOD_RULES",
        "src/adloco/engine/methods.py": "METHODS",
        "src/adloco/stages/__init__.py": "STAGES",
        "src/adloco/report/settings.py": "def _baselines",
    }
    for path, name in holds.items():
        assert f"`{path}`" in recipes
        assert name in (ROOT / path).read_text(), (path, name)


def test_the_engine_names_no_method_and_no_batch_test():
    # "The engine names no method and no batch test": no string of one appears in
    # engine/ outside the method parts (engine/methods.py), which list them.
    from adloco.algo.batch_tests import TESTS
    from adloco.config.runs import METHOD_RULES

    assert "The engine names no method and no batch test" in section("Start reading here")
    names = (set(METHOD_RULES) | set(TESTS)) - {"none"}
    for path in sorted((ROOT / "src/adloco/engine").glob("*.py")):
        if path.name == "methods.py":
            continue
        strings = {
            n.value
            for n in ast.walk(ast.parse(path.read_text()))
            if isinstance(n, ast.Constant) and isinstance(n.value, str)
        }
        assert not strings & names, f"{path.name} names {strings & names}"
