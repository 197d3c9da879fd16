"""pyproject.toml, environment.yml and workflow/envs/adloco.yaml agree.

environment.yml (the one-file host environment) lists pyproject's packages
with the same version bounds: ``dependencies`` and the ``data``, ``dev`` and
``workflow`` extras. The rules' environment pins ``dependencies`` and the
``data`` extra, and everything they need, at exact versions within those
bounds, without the workflow tools (Snakemake, DVC), and is the file
scripts/lock-rule-env.py writes for its pins. Conda-forge names that differ
from PyPI's are mapped; the package itself is installed from the checkout by pip.
"""

from __future__ import annotations

import importlib.util
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
RULE_ENV = ROOT / "workflow/envs/adloco.yaml"
# conda-forge name -> PyPI name, where they differ.
CONDA_TO_PYPI = {"pytorch": "torch", "matplotlib-base": "matplotlib"}


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def requirements(lines: list[str]) -> dict[str, SpecifierSet]:
    reqs = [Requirement(line) for line in lines]
    return {canonicalize_name(r.name): r.specifier for r in reqs}


def project_requirements(extras: list[str]) -> dict[str, SpecifierSet]:
    project = pyproject()["project"]
    expected = requirements(project["dependencies"])
    for extra in extras:
        expected.update(requirements(project["optional-dependencies"][extra]))
    return expected


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
        # conda's `name=1.2.3` is an exact version.
        spec = re.sub(r"^=(?=\d)", "==", spec)
        packages[canonicalize_name(CONDA_TO_PYPI.get(name, name))] = SpecifierSet(spec)
    return packages, editable, env


def pinned_version(spec: SpecifierSet) -> str:
    (only,) = list(spec)
    assert only.operator == "==" and "*" not in only.version, spec
    return only.version


def test_host_environment_has_the_packages_and_bounds_of_pyproject():
    expected = project_requirements(["data", "dev", "workflow"])
    packages, _, env = conda_env(ROOT / "environment.yml")
    python = packages.pop("python")
    assert sorted(packages) == sorted(expected)
    assert {name: str(spec) for name, spec in packages.items()} == {
        name: str(spec) for name, spec in expected.items()
    }
    assert python == SpecifierSet(pyproject()["project"]["requires-python"])
    assert env["channels"][0] == "conda-forge"


def test_rule_environment_pins_every_package_within_pyprojects_bounds():
    expected = project_requirements(["data"])
    packages, _, env = conda_env(RULE_ENV)
    assert env["channels"][0] == "conda-forge"
    versions = {name: pinned_version(spec) for name, spec in packages.items()}
    assert SpecifierSet(pyproject()["project"]["requires-python"]).contains(versions["python"])
    for name, bounds in expected.items():
        assert name in versions, f"{name} is not pinned in {RULE_ENV.name}"
        assert bounds.contains(versions[name], prereleases=True), (name, versions[name], bounds)


def test_rule_environment_holds_no_workflow_tool():
    # Snakemake and DVC run on the host and call `adloco`, TensorBoard draws the
    # jobs' curves there; a job needs none of them (tensorboardX writes the curves).
    tools = project_requirements(["workflow"]).keys() - project_requirements([]).keys()
    assert tools == {"snakemake", "dvc", "tensorboard"}
    packages, _, _ = conda_env(RULE_ENV)
    assert not [name for name in packages if name.startswith(("snakemake", "dvc"))]
    assert "tensorboard" not in packages and "tensorboardx" in packages


def test_rule_environment_is_what_the_lock_script_writes():
    # Hand edits are caught, and the script's format stays the committed one.
    spec = importlib.util.spec_from_file_location("lock", ROOT / "scripts/lock-rule-env.py")
    lock = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lock)
    env = yaml.safe_load(RULE_ENV.read_text())
    conda = [e for e in env["dependencies"] if isinstance(e, str)]
    (pip,) = [e["pip"] for e in env["dependencies"] if isinstance(e, dict)]
    python = next(e for e in conda if e.startswith("python=")).removeprefix("python=")
    pins = dict(line.split("==") for line in pip if not line.startswith("-e "))
    assert lock.render(python, pins) == RULE_ENV.read_text()


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
        # `rule name:`, or `rule:` with a `name:` (train.smk's rule per run)
        count = len(re.findall(r"^\s*rule( \w+)?:", text, flags=re.M))
        rules += count
        assert text.count("conda:\n") == count, path
        assert text.count('"../envs/adloco.yaml"') == count, path
    assert rules == 8
