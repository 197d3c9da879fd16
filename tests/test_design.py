"""docs/DESIGN.md against the code: the layout tables, the tests they name, a round's order,
the direction of the imports and the files the recipes name."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DESIGN = (ROOT / "docs/DESIGN.md").read_text()
PACKAGES = {"src/adloco": "adloco", "workflow/lib/adloco_workflow": "adloco_workflow"}


def section(title: str) -> str:
    return DESIGN.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def defines_code(tree: ast.Module) -> bool:
    return any(isinstance(n, ast.FunctionDef | ast.ClassDef) for n in tree.body)


def modules(folder: str) -> dict[str, Path]:
    """The modules of a package folder (an __init__.py only when it defines code)."""
    base = ROOT / folder
    return {
        p.relative_to(base).as_posix(): p
        for p in sorted(base.rglob("*.py"))
        if p.name != "__init__.py" or defines_code(ast.parse(p.read_text()))
    }


def tables() -> dict[str, list[tuple[str, str]]]:
    """Each layout table's rows (module, tested-in cell), by package folder."""
    layout = section("Layout")
    package, workflow = layout.split("`workflow/lib/adloco_workflow/`", 1)
    row = re.compile(r"^\| `([\w/]+\.py)` \| .* \| (.*) \|$", flags=re.M)
    return {
        "src/adloco": row.findall(package),
        "workflow/lib/adloco_workflow": row.findall(workflow),
    }


def dotted(folder: str, module: str) -> str:
    parts = Path(module).with_suffix("").parts
    parts = parts[:-1] if parts[-1] == "__init__" else parts
    return ".".join([PACKAGES[folder], *parts])


def top_level_names(tree: ast.Module) -> set[str]:
    names = set()
    for n in tree.body:
        if isinstance(n, ast.FunctionDef | ast.ClassDef):
            names.add(n.name)
        elif isinstance(n, ast.Assign):
            names |= {t.id for t in n.targets if isinstance(t, ast.Name)}
        elif isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name):
            names.add(n.target.id)
    return names


def imports(tree: ast.AST) -> tuple[set[str], set[str]]:
    """(modules imported, names imported from the project's packages)."""
    mods, names = set(), set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            mods |= {a.name for a in n.names}
        elif isinstance(n, ast.ImportFrom) and n.module and n.level == 0:
            mods |= {n.module, *(f"{n.module}.{a.name}" for a in n.names)}
            if n.module.split(".")[0] in PACKAGES.values():
                names |= {a.name for a in n.names}
    return mods, names


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
        p.relative_to(ROOT / "src/adloco").as_posix(): imports(ast.parse(p.read_text()))[0]
        for p in sorted((ROOT / "src/adloco" / sub).rglob("*.py"))
    }


STAGE_MODULES = (
    "adloco.data.corpus", "adloco.data.tokenize", "adloco.model.pretrain",
    "adloco.calibrate.device", "adloco.variance", "adloco.engine.run", "adloco.report",
    "adloco.cli", "adloco.stages",
)  # fmt: skip


def test_the_imports_point_down_as_the_dependencies_section_says():
    text = section("Dependencies")
    assert "`engine/`\nimports no stage module but `engine/run.py`" in text
    for module, mods in package_imports("engine").items():
        if module == "engine/run.py":
            continue
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
