"""The report's layers import only downwards: inputs, analysis, tables, figures, page.

Each layer of ``src/adloco/report/`` may import the layers before it in the
order the report runs, never one after it, and the analysis neither draws
nor writes HTML nor parses a command line: checked on every module's imports.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPORT = Path(__file__).resolve().parents[2] / "src" / "adloco" / "report"
LAYERS = ("inputs", "analysis", "tables", "figures", "page")
# What a layer may not import, beyond the report's layers after it.
FORBIDDEN = {
    "inputs": ("matplotlib", "markupsafe", "jinja2", "argparse"),
    "analysis": ("matplotlib", "seaborn", "markupsafe", "jinja2", "argparse"),
    "tables": ("matplotlib", "seaborn", "markupsafe", "jinja2", "argparse"),
    "figures": ("markupsafe", "jinja2", "argparse"),
    "page": ("matplotlib", "seaborn", "argparse"),
}


def imported(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_every_module_of_the_report_sits_in_a_layer_or_is_the_flow():
    loose = sorted(p.name for p in REPORT.glob("*.py"))
    assert loose == ["__init__.py", "regime_report.py", "settings.py"]
    assert sorted(p.name for p in REPORT.iterdir() if p.is_dir() and p.name != "__pycache__") == (
        sorted(LAYERS)
    )


def test_the_settings_sit_before_every_layer():
    # settings.py (the report section, the rules, the roles) is read by every layer,
    # so it imports none of them.
    names = imported(REPORT / "settings.py")
    assert not {n for n in names if n.startswith("adloco.report.")}, names


@pytest.mark.parametrize("layer", LAYERS)
def test_a_layer_imports_no_later_layer_and_nothing_it_should_not(layer):
    later = LAYERS[LAYERS.index(layer) + 1 :]
    for path in sorted((REPORT / layer).glob("*.py")):
        for name in imported(path):
            top = name.split(".")[0]
            assert top not in FORBIDDEN[layer], f"{layer}/{path.name} imports {name}"
            parts = name.split(".")
            if parts[:2] == ["adloco", "report"] and len(parts) > 2:
                assert parts[2] not in later, f"{layer}/{path.name} imports {name}"
                assert parts[2] != "regime_report", f"{layer}/{path.name} imports the regimes stage"
