"""The package's floors: every import points down, and Snakemake's imports stay torch-free.

``FLOORS`` lists src/adloco's packages from the ground up (docs/DESIGN.md,
"Dependencies"). A module belongs to the floor of the longest entry its name
starts with: ``model.llama`` (the model the engine and the algorithms run)
sits below ``algo``, the rest of ``model/`` (the base, pretraining, the HF
export: stage libraries over the engine) above ``engine``, and ``train_run``
(the train stage's library, over the engine and the model's base and export)
above them. A module may
import its own floor and those below it, never one above: every import is
read from the code, those inside functions and under ``TYPE_CHECKING``
included, since each still ties the lower floor to the higher one.

Snakemake imports the workflow's modules (workflow/Snakefile, workflow/rules/,
workflow/lib/adloco_workflow, and through them adloco.stages, adloco.config,
adloco.core.paths) while it parses, on a host that may have Snakemake alone;
what they import when imported (module level, not inside a function, not under
``TYPE_CHECKING``) is followed to the end and must not reach torch or any
package but the standard library, PyYAML and jsonschema (Snakemake's own
requirements) and Snakemake. Read statically, in well under a second;
tests/workflow/test_snakemake_only_host.py imports them for real.
"""

from __future__ import annotations

import ast
import re
import sys
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
LIB = ROOT / "workflow" / "lib"

# From the ground up; "" is the root package (adloco/__init__.py: the version alone).
FLOORS = (
    "",
    "core",
    "formats",
    "config",
    "data",
    "model.llama",
    "algo",
    "engine",
    "model",
    "calibrate",
    "variance",
    "train_run",
    "dvc",
    "report",
    "stages",
    "cli",
    "__main__",
)
# What a module Snakemake imports may import beyond the standard library and the two packages.
SNAKEMAKE_MAY_IMPORT = {"yaml", "jsonschema", "snakemake", "adloco", "adloco_workflow"}


def module_files() -> dict[str, Path]:
    """Every module of adloco and adloco_workflow: its dotted name and its file."""
    files = {}
    for base, package in ((SRC, "adloco"), (LIB, "adloco_workflow")):
        for path in sorted((base / package).rglob("*.py")):
            parts = path.relative_to(base).with_suffix("").parts
            files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return files


MODULES = module_files()


def resolve(name: str) -> str:
    """The module an imported name is: itself, or the longest module it starts with."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in MODULES:
            return ".".join(parts[:end])
    return name


def absolute(node: ast.ImportFrom, module: str) -> str:
    if not node.level:
        return node.module or ""
    package = module.split(".")
    if MODULES[module].name != "__init__.py":
        package = package[:-1]
    package = package[: len(package) - node.level + 1]
    return ".".join([*package, *([node.module] if node.module else [])])


def imported_by(nodes, module: str) -> set[str]:
    """The modules the import statements among ``nodes`` name (``from a import b``: a and a.b)."""
    names = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            source = absolute(node, module)
            names |= {source, *(f"{source}.{alias.name}" for alias in node.names)}
    return {resolve(name) for name in names}


@cache
def tree(module: str) -> ast.Module:
    return ast.parse(MODULES[module].read_text(encoding="utf-8"))


def every_import(module: str) -> set[str]:
    """Every module ``module`` imports anywhere: in functions, under TYPE_CHECKING included."""
    return imported_by(ast.walk(tree(module)), module) - {module}


def is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def executed(body: list[ast.stmt]):
    """The statements that run when the module is imported: not in functions, not TYPE_CHECKING."""
    for node in body:
        yield node
        if isinstance(node, ast.If):
            if not is_type_checking(node.test):
                yield from executed(node.body)
            yield from executed(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                yield from executed(block)
        elif isinstance(node, (ast.ClassDef, ast.With)):
            yield from executed(node.body)


def import_time_imports(module: str) -> set[str]:
    """What importing ``module`` imports: its executed imports and its parent packages."""
    parents = {".".join(module.split(".")[:end]) for end in range(1, module.count(".") + 1)}
    return imported_by(executed(tree(module).body), module) | parents - {module}


def floor(module: str) -> int:
    """The floor of an adloco module: the longest entry of FLOORS its name starts with."""
    inside = module.removeprefix("adloco").removeprefix(".")
    entries = [e for e in FLOORS if e == "" or inside == e or inside.startswith(e + ".")]
    return FLOORS.index(max(entries, key=len))


def upward_imports() -> list[str]:
    found = []
    for module in MODULES:
        if not module.startswith("adloco."):
            continue
        for name in sorted(every_import(module)):
            if name.split(".")[0] == "adloco" and floor(name) > floor(module):
                found.append(f"{module} ({FLOORS[floor(module)] or 'adloco'}) imports {name}")
    return found


def test_every_package_has_its_floor_and_every_floor_a_package():
    packages = {p.name for p in (SRC / "adloco").iterdir() if (p / "__init__.py").is_file()}
    modules = {p.stem for p in (SRC / "adloco").glob("*.py")} - {"__init__"}
    named = {entry.split(".")[0] for entry in FLOORS if entry}
    assert named == packages | modules
    for entry in FLOORS[1:]:
        assert entry in MODULES or f"adloco.{entry}" in MODULES, entry


def test_no_import_runs_up_a_floor():
    assert upward_imports() == []


def patched_tree(module: str, code: str):
    """``tree`` with ``code`` in front of ``module``'s own source."""

    def read(name: str) -> ast.Module:
        source = MODULES[name].read_text(encoding="utf-8")
        return ast.parse(code + source if name == module else source)

    return read


def test_the_check_sees_an_upward_import_in_a_function_and_under_type_checking(monkeypatch):
    # config/ sits below algo/ and engine/: both imports run up.
    code = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from adloco.engine.spec import EngineSpec\n"
        "def f():\n    from ..algo import merge\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "tree", patched_tree("adloco.config.checks", code))
    found = [line for line in upward_imports() if line.startswith("adloco.config.checks ")]
    assert found == [
        "adloco.config.checks (config) imports adloco.algo",
        "adloco.config.checks (config) imports adloco.algo.merge",
        "adloco.config.checks (config) imports adloco.engine.spec",
    ]


def snakemake_roots() -> set[str]:
    """The adloco and adloco_workflow modules the Snakefile, its rules and the profile import."""
    sources = [ROOT / "workflow/Snakefile", *sorted((ROOT / "workflow/rules").glob("*.smk"))]
    sources.append(ROOT / "profiles/default/config.yaml")
    text = "\n".join(path.read_text(encoding="utf-8") for path in sources)
    roots = set()
    for line in re.findall(r"^\s*((?:import|from) adloco\S*(?: .*)?)$", text, flags=re.M):
        node = ast.parse(line.split("#")[0].strip()).body[0]
        roots |= imported_by([node], "adloco")
    return roots


def snakemakes_imports() -> dict[str, set[str]]:
    """Every module importing the roots loads, and the outside packages each one imports."""
    todo, seen, outside = sorted(snakemake_roots()), set(), {}
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        names = import_time_imports(module)
        outside[module] = {n.split(".")[0] for n in names} - set(sys.stdlib_module_names)
        todo += sorted(n for n in names if n in MODULES)
    return outside


def test_what_snakemake_imports_needs_no_torch_nor_anything_beyond_its_own_requirements():
    roots = snakemake_roots()
    assert {"adloco.stages", "adloco.core.paths", "adloco_workflow.plan"} <= roots
    imports = snakemakes_imports()
    # The closure reaches the configuration, the formats it reads and the stages' declarations.
    assert {"adloco.config", "adloco.formats.calibration", "adloco.stages.train"} <= set(imports)
    beyond = {m: sorted(names - SNAKEMAKE_MAY_IMPORT) for m, names in imports.items()}
    assert {m: names for m, names in beyond.items() if names} == {}


@pytest.mark.parametrize("module", ["adloco.formats.clock", "adloco.config.cluster"])
def test_the_closure_follows_imports_to_torch(monkeypatch, module):
    # A module Snakemake reaches that imported torch when imported would be found;
    # one that imports it inside a function or for annotations only would not.
    monkeypatch.setattr(sys.modules[__name__], "tree", patched_tree(module, "import torch\n"))
    assert "torch" in snakemakes_imports()[module]
    lazy = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import torch\n"
    lazy += "def f():\n    import torch\n"
    monkeypatch.setattr(sys.modules[__name__], "tree", patched_tree(module, lazy))
    assert "torch" not in snakemakes_imports()[module]
