"""Each file name says what it holds: no two modules of src/adloco share a name
but the deliberate pairs docs/DESIGN.md names, and tests/report mirrors the report's
layers, each test file named after its module."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "adloco"

# A stage's declaration, named after its command, beside the library module it calls.
DELIBERATE = {
    "pretrain.py": {"stages/pretrain.py", "model/pretrain.py"},
    "tokenize.py": {"stages/tokenize.py", "data/tokenize.py"},
}


def modules_by_name(root: Path) -> dict[str, set[str]]:
    """Every module's path under root, by file name, ``__init__.py`` left out."""
    found: dict[str, set[str]] = defaultdict(set)
    for path in root.rglob("*.py"):
        if path.name != "__init__.py":
            found[path.name].add(path.relative_to(root).as_posix())
    return found


def test_no_two_modules_share_a_name_but_the_deliberate_pairs():
    repeated = {name: paths for name, paths in modules_by_name(SRC).items() if len(paths) > 1}
    assert repeated == DELIBERATE


def test_modules_by_name_finds_a_repeat(tmp_path):
    for folder in ("a", "b", "b/c"):
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
        (tmp_path / folder / "__init__.py").write_text("")
    (tmp_path / "a" / "x.py").write_text("")
    (tmp_path / "b" / "c" / "x.py").write_text("")
    (tmp_path / "b" / "y.py").write_text("")
    found = modules_by_name(tmp_path)
    assert found["x.py"] == {"a/x.py", "b/c/x.py"}
    assert found["y.py"] == {"b/y.py"}
    assert "__init__.py" not in found


REPORT_TESTS = Path(__file__).resolve().parent / "report"
LAYERS = ("inputs", "analysis", "tables", "figures", "page")


def test_report_tests_mirror_the_layers_and_name_their_modules():
    report = SRC / "report"
    assert sorted(p.name for p in REPORT_TESTS.iterdir() if p.name in LAYERS) == sorted(LAYERS)
    for layer in LAYERS:
        for test in sorted((REPORT_TESTS / layer).glob("test_*.py")):
            module = report / layer / (test.name.removeprefix("test_"))
            assert module.is_file(), f"tests/report/{layer}/{test.name} names no module"
    # Beside the layers: the flow's modules, the layer rule and the golden outputs.
    loose = {p.name for p in REPORT_TESTS.glob("test_*.py")}
    flow = {f"test_{p.stem}.py" for p in report.glob("*.py") if p.name != "__init__.py"}
    assert loose == flow | {"test_report.py", "test_layers.py", "test_golden.py"}
