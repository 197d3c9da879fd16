"""Every install path installs requirements.lock's versions.

``requirements.lock`` (scripts/lock.py) pins every package of pyproject.toml
(``dependencies`` and all extras) and everything they need at one exact
version. The install paths read it: ``make setup`` (``pip install -c
requirements.lock``, torch at the lock's version), ``environment.yml``
(pyproject's packages at the lock's versions, the rest held by ``-c
requirements.lock``) and ``workflow/envs/adloco.yaml`` (the rules'
environment: the lock's ``# rules`` lines, pinned in the file itself). A
version in any of them that is not the lock's fails here, naming the file and
the package; the lock's versions must lie within pyproject's bounds.
Conda-forge names that differ from PyPI's are mapped; the package itself is
installed from the checkout by pip.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
from importlib import metadata
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
LOCK = "requirements.lock"
HOST_ENV = "environment.yml"
RULE_ENV = "workflow/envs/adloco.yaml"
# conda-forge name -> PyPI name, where they differ.
CONDA_TO_PYPI = {"pytorch": "torch", "matplotlib-base": "matplotlib"}


def lock_script():
    spec = importlib.util.spec_from_file_location("lock", ROOT / "scripts/lock.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pyproject(root: Path = ROOT) -> dict:
    return tomllib.loads((root / "pyproject.toml").read_text())


def requirements(lines: list[str]) -> dict[str, SpecifierSet]:
    reqs = [Requirement(line) for line in lines]
    return {canonicalize_name(r.name): r.specifier for r in reqs}


def project_requirements(extras: list[str], root: Path = ROOT) -> dict[str, SpecifierSet]:
    project = pyproject(root)["project"]
    expected = requirements(project["dependencies"])
    for extra in extras:
        expected.update(requirements(project["optional-dependencies"][extra]))
    return expected


ALL_EXTRAS = ["data", "dev", "workflow"]


def read_lock(root: Path = ROOT) -> tuple[str, dict[str, str], set[str]]:
    """(its Python, canonical name -> version, the rules' canonical names), parsed here."""
    python, pins, rules = None, {}, set()
    for line in (root / LOCK).read_text().splitlines():
        if line.startswith("# python "):
            python = line.removeprefix("# python ")
        if not line or line.startswith("#"):
            continue
        requirement, _, mark = line.partition("#")
        (spec,) = Requirement(requirement).specifier
        name = canonicalize_name(Requirement(requirement).name)
        assert spec.operator == "==" and "*" not in spec.version, line
        assert name not in pins, f"{name} pinned twice in {LOCK}"
        pins[name] = spec.version
        if mark.strip() == "rules":
            rules.add(name)
    assert python is not None, f"{LOCK} names no Python"
    return python, pins, rules


def conda_env(path: Path) -> tuple[dict[str, SpecifierSet], list[str], list[str], dict]:
    """(packages by PyPI name with their specifiers, `-e` targets, `-c` files, the file)."""
    env = yaml.safe_load(path.read_text())
    packages: dict[str, SpecifierSet] = {}
    editable: list[str] = []
    constraints: list[str] = []
    for entry in env["dependencies"]:
        if isinstance(entry, dict):
            for line in entry["pip"]:
                if line.startswith("-e "):
                    editable.append(line.removeprefix("-e ").strip())
                elif line.startswith("-c "):
                    constraints.append(line.removeprefix("-c ").strip())
                else:
                    packages.update(requirements([line]))
            continue
        name, spec = re.fullmatch(r"([A-Za-z0-9_.-]+)\s*(.*)", entry).groups()
        if name == "pip":
            continue
        # conda's `name=1.2.3` is an exact version.
        spec = re.sub(r"^=(?=\d)", "==", spec)
        packages[canonicalize_name(CONDA_TO_PYPI.get(name, name))] = SpecifierSet(spec)
    return packages, editable, constraints, env


def pinned_version(spec: SpecifierSet) -> str | None:
    """The one exact version of ``spec``, or None when it is not one."""
    specs = list(spec)
    if len(specs) != 1 or specs[0].operator not in ("==", "===") or "*" in specs[0].version:
        return None
    return specs[0].version


def disagreements(root: Path = ROOT) -> list[str]:
    """Every version of an install path of ``root`` that is not its lock's, in words."""
    python, lock, rules = read_lock(root)
    found = []
    for name, bounds in project_requirements(ALL_EXTRAS, root).items():
        if name not in lock:
            found.append(f"pyproject.toml: {name} is not in {LOCK}")
        elif not bounds.contains(lock[name], prereleases=True):
            found.append(f"pyproject.toml: {name}{bounds} excludes the lock's {lock[name]}")
    for path in (HOST_ENV, RULE_ENV):
        packages, _, _, _ = conda_env(root / path)
        for name, spec in packages.items():
            version = pinned_version(spec)
            expected = python if name == "python" else lock.get(name)
            if version != expected:
                found.append(f"{path}: {name}{spec}, the lock's is {expected}")
    return found


def test_lock_pins_each_package_once_and_the_python_pyproject_allows():
    python, lock, rules = read_lock()
    assert len(lock) > 100 and rules < lock.keys()
    assert SpecifierSet(pyproject()["project"]["requires-python"]).contains(python)


def test_every_install_path_has_the_locks_versions():
    assert disagreements() == []


@pytest.mark.parametrize(
    ("path", "old", "new", "expected"),
    [
        (HOST_ENV, "transformers==", "transformers==0.", "environment.yml: transformers==0."),
        (RULE_ENV, "numpy==", "numpy==0.", f"{RULE_ENV}: numpy==0."),
        (HOST_ENV, "python=", "python=2.", "environment.yml: python==2."),
        ("pyproject.toml", '"numpy>=1.26"', '"numpy>=99"', "pyproject.toml: numpy>=99 excludes"),
        ("pyproject.toml", '"ruff>=0.6"', '"ruff>=0.6", "left-pad"', "pyproject.toml: left-pad"),
    ],
)
def test_a_version_that_is_not_the_locks_is_named(tmp_path, path, old, new, expected):
    for name in (LOCK, HOST_ENV, RULE_ENV, "pyproject.toml"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    text = (tmp_path / path).read_text()
    assert old in text
    (tmp_path / path).write_text(text.replace(old, new, 1))
    (found,) = disagreements(tmp_path)
    assert found.startswith(expected), found


def test_host_environment_pins_every_package_of_pyproject_and_reads_the_lock():
    packages, _, constraints, env = conda_env(ROOT / HOST_ENV)
    packages.pop("python")
    assert sorted(packages) == sorted(project_requirements(ALL_EXTRAS))
    # conda runs pip beside the environment file, where the lock is.
    assert [(ROOT / c).resolve() for c in constraints] == [ROOT / LOCK]
    assert env["channels"][0] == "conda-forge"


def test_rule_environment_pins_the_locks_rules_packages():
    packages, _, constraints, env = conda_env(ROOT / RULE_ENV)
    packages.pop("python")
    _, lock, rules = read_lock()
    assert sorted(packages) == sorted(rules)
    assert project_requirements(["data"]).keys() <= rules
    # The pins are in the file itself: Snakemake rebuilds an environment when its file changes.
    assert constraints == []
    assert env["channels"][0] == "conda-forge"


def test_slurm_plugin_is_pinned_exactly_in_the_workflow_extra():
    workflow = project_requirements(["workflow"])
    assert pinned_version(workflow["snakemake-executor-plugin-slurm"]) is not None


def test_conda_files_are_what_the_lock_script_writes_from_the_lock():
    # Hand edits are caught, and the script's format stays the committed one.
    lock = lock_script()
    assert lock.host_env_text(ROOT) == (ROOT / HOST_ENV).read_text()
    assert lock.rule_env_text(ROOT) == (ROOT / RULE_ENV).read_text()
    # The script's reading of the lock is this test's.
    python, pins, rules = lock.read_lock(ROOT)
    assert (python, {canonicalize_name(n): v for n, v in pins.items()}, rules) == read_lock()


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_setup_installs_torch_and_everything_else_at_the_locks_versions():
    _, lock, _ = read_lock()
    # -n -B: print every command of the setup target (variables expanded), run none.
    commands = subprocess.run(
        ["make", "-n", "-B", "setup", "VENV=/nonexistent"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.splitlines()  # fmt: skip
    torch = [c for c in commands if "install-torch.sh" in c]
    assert [c.split()[-1] for c in torch] == [lock["torch"]]
    pip = [c for c in commands if " pip install " in c]
    assert pip and all(" -c requirements.lock " in c for c in pip), pip
    assert any(".[dev,data,workflow]" in c for c in pip)


def test_the_running_environment_is_the_lock():
    # What `make setup` installed: the versions the tests pass with are the lock's.
    _, lock, _ = read_lock()
    installed = {
        canonicalize_name(d.metadata["Name"]): d.version.split("+")[0]
        for d in metadata.distributions()
    }
    differ = {n: (installed[n], v) for n, v in lock.items() if installed.get(n, v) != v}
    assert differ == {}, f"installed, locked: {differ}; run `make setup`"


def test_rule_environment_holds_no_workflow_tool():
    # Snakemake and DVC run on the host and call `adloco`, TensorBoard draws the
    # jobs' curves there; a job needs none of them (tensorboardX writes the curves).
    tools = project_requirements(["workflow"]).keys() - project_requirements([]).keys()
    assert tools == {"snakemake", "dvc", "tensorboard", "snakemake-executor-plugin-slurm"}
    packages, _, _, _ = conda_env(ROOT / RULE_ENV)
    assert not [name for name in packages if name.startswith(("snakemake", "dvc"))]
    assert "tensorboard" not in packages and "tensorboardx" in packages


def test_editable_install_points_at_the_repository_root():
    _, editable, _, _ = conda_env(ROOT / HOST_ENV)
    assert [(ROOT / e).resolve() for e in editable] == [ROOT]
    _, editable, _, _ = conda_env(ROOT / RULE_ENV)
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
