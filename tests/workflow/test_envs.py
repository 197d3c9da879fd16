"""pyproject.toml, environment.yml and workflow/envs/adloco.yaml agree.

The three files list the same packages with the same version bounds: the
rules' conda environment has pyproject's ``dependencies``, the top-level
environment also the ``dev`` extra. Conda-forge names that differ from PyPI's
are mapped; the package itself is installed from the checkout by pip.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[2]
# conda-forge name -> PyPI name, where they differ.
CONDA_TO_PYPI = {"pytorch": "torch", "matplotlib-base": "matplotlib"}


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def requirements(lines: list[str]) -> dict[str, SpecifierSet]:
    reqs = [Requirement(line) for line in lines]
    return {canonicalize_name(r.name): r.specifier for r in reqs}


def conda_env(path: Path) -> tuple[dict[str, SpecifierSet], list[str], dict]:
    """(packages by PyPI name with their bounds, `-e` targets, the parsed file)."""
    env = yaml.safe_load(path.read_text())
    packages: dict[str, SpecifierSet] = {}
    editable: list[str] = []
    for entry in env["dependencies"]:
        if isinstance(entry, dict):
            for line in entry["pip"]:
                if line.startswith("-e "):
                    editable.append(line.removeprefix("-e ").strip())
                else:
                    packages.update(requirements([line]))
            continue
        name, spec = re.fullmatch(r"([A-Za-z0-9_.-]+)\s*(.*)", entry).groups()
        if name == "pip":
            continue
        packages[canonicalize_name(CONDA_TO_PYPI.get(name, name))] = SpecifierSet(spec)
    return packages, editable, env


@pytest.mark.parametrize(
    ("env_file", "extras"),
    [("workflow/envs/adloco.yaml", ["data"]), ("environment.yml", ["data", "dev"])],
)
def test_conda_environment_has_the_packages_and_bounds_of_pyproject(env_file, extras):
    project = pyproject()["project"]
    expected = requirements(project["dependencies"])
    for extra in extras:
        expected.update(requirements(project["optional-dependencies"][extra]))
    packages, _, env = conda_env(ROOT / env_file)
    python = packages.pop("python")
    assert sorted(packages) == sorted(expected)
    assert {name: str(spec) for name, spec in packages.items()} == {
        name: str(spec) for name, spec in expected.items()
    }
    assert python == SpecifierSet(project["requires-python"])
    assert env["channels"][0] == "conda-forge"


def test_editable_install_points_at_the_repository_root():
    _, editable, _ = conda_env(ROOT / "environment.yml")
    assert [(ROOT / e).resolve() for e in editable] == [ROOT]
    _, editable, _ = conda_env(ROOT / "workflow/envs/adloco.yaml")
    # conda runs pip beside the environment file: Snakemake copies it into
    # .snakemake/conda/; both places are two levels below the root.
    for folder in ("workflow/envs", ".snakemake/conda"):
        assert [(ROOT / folder / e).resolve() for e in editable] == [ROOT]


def test_every_rule_uses_the_workflow_environment():
    rule_files = sorted((ROOT / "workflow/rules").glob("*.smk"))
    rules = 0
    for path in rule_files:
        text = path.read_text()
        count = len(re.findall(r"^\s*rule \w+:", text, flags=re.M))
        rules += count
        assert text.count("conda:\n") == count, path
        assert text.count('"../envs/adloco.yaml"') == count, path
    assert rules == 6
