"""Each file name says what it holds: no two modules of src/adloco share a name
but the deliberate pairs docs/DESIGN.md names."""

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
