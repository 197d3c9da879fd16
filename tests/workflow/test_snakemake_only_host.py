"""The workflow on a host that has Snakemake and nothing of the project.

Most Snakemake users run a workflow from an environment holding Snakemake
alone and let ``--use-conda`` build each rule's environment. This test builds
such an environment (a virtual environment with ``pip install snakemake==<the
version of the project's environment>``; pip's cache makes a rebuild take
seconds) and dry-runs the workflow in it: no ``adloco``, torch or
transformers importable, no ``--use-conda`` (nothing is executed), and still
the configuration is validated naming the key, every run is resolved and every
job is planned, from the checkout's own modules (workflow/rules/common.smk).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from test_snakemake import ROOT, expected_train_jobs, parse_dry_run

# pip's words when it cannot reach the index (or finds nothing there).
UNREACHABLE = re.compile(
    r"No matching distribution found|Could not find a version|Failed to establish a new "
    r"connection|Network is unreachable|Temporary failure in name resolution|ConnectTimeout",
)


@pytest.fixture(scope="module")
def snakemake_only(tmp_path_factory) -> dict[str, str]:
    """PATH and environment of a fresh virtual environment with only Snakemake."""
    venv = tmp_path_factory.mktemp("snakemake-only") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    version = metadata.version("snakemake")
    install = subprocess.run(
        [str(venv / "bin/python"), "-m", "pip", "install", "-q", f"snakemake=={version}"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if install.returncode != 0:
        if UNREACHABLE.search(install.stdout + install.stderr):
            pytest.skip(f"PyPI cannot be reached to install snakemake=={version}")
        raise AssertionError(install.stdout + install.stderr)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}/usr/bin{os.pathsep}/bin"
    return env


def run(env: dict[str, str], *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        list(args), cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False
    )


def workflow_imports() -> list[str]:
    """The adloco and adloco_workflow modules the workflow imports while Snakemake parses it."""
    lib = ROOT / "workflow/lib/adloco_workflow"
    sources = [ROOT / "workflow/rules/common.smk", ROOT / "profiles/default/config.yaml"]
    text = "\n".join(path.read_text() for path in [*sources, *sorted(lib.glob("*.py"))])
    pattern = r"^\s*(?:import|from) (adloco(?:_workflow)?(?:\.\w+)*)"
    modules = re.findall(pattern, text, flags=re.M)
    sources_of = {"adloco": ROOT / "src", "adloco_workflow": ROOT / "workflow/lib"}
    found = re.findall(r"^from (adloco(?:_workflow)?(?:\.\w+)*) import ([\w, ]+)$", text, re.M)
    for package, names in found:
        folder = sources_of[package.split(".")[0]].joinpath(*package.split("."))
        # A name imported from a package that is one of its modules.
        modules += [
            f"{package}.{name.strip()}"
            for name in names.split(",")
            if (folder / f"{name.strip()}.py").is_file()
        ]
    return sorted(set(modules))


def loaded_packages(*modules: str) -> set[str]:
    """Top-level packages outside the standard library that importing ``modules`` loads."""
    code = (
        f"import sys; sys.path.insert(0, {str(ROOT / 'workflow/lib')!r})\n"
        f"for name in {modules!r}: __import__(name)\n"
        "print(' '.join(sorted({m.split('.')[0] for m in sys.modules} - "
        "set(sys.stdlib_module_names))))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    return set(result.stdout.split())


def test_the_workflow_imports_need_only_snakemakes_dependencies():
    # jsonschema and PyYAML are requirements of Snakemake itself.
    requires = {r.split()[0].split(";")[0].lower() for r in metadata.requires("snakemake")}
    assert {"jsonschema", "pyyaml"} <= requires
    modules = workflow_imports()
    assert {"adloco.config", "adloco.core.paths", "adloco_workflow.snakemake_lock"} <= set(modules)
    extra = loaded_packages(*modules) - loaded_packages("jsonschema", "yaml")
    assert extra == {"adloco", "adloco_workflow"}


@pytest.mark.slow
@pytest.mark.env_build
def test_the_environment_has_snakemake_and_nothing_of_the_project(snakemake_only):
    for module in ("adloco", "torch", "transformers", "pandas"):
        result = run(snakemake_only, "python", "-c", f"import {module}", cwd=Path("/"))
        assert result.returncode != 0, module
        assert "ModuleNotFoundError" in result.stderr
    assert run(snakemake_only, "snakemake", "--version").returncode == 0


@pytest.mark.slow
@pytest.mark.env_build
@pytest.mark.parametrize("config_file", ["config/config.yaml", "config/test.yaml"])
def test_dry_run_plans_every_job(snakemake_only, config_file):
    config = yaml.safe_load((ROOT / config_file).read_text())
    result = run(snakemake_only, "snakemake", "-n", "--forceall", "--configfile", config_file)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    counts = Counter(job["rule"] for job in parse_dry_run(output))
    trains = expected_train_jobs(config)
    assert {rule: counts[rule] for rule in trains} == trains
    assert counts["pretrain"] == (config["model"]["source"] == "base")
    assert counts["calibrate"] == len(config["cluster"]["devices"])
    assert counts["tokenize"] == counts["variance"] == counts["report"] == 1


@pytest.mark.slow
@pytest.mark.env_build
def test_a_bad_run_fails_before_any_job_naming_the_key(snakemake_only, tmp_path):
    # A cross-field rule of adloco.config, beyond the schema: run resolution.
    config = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    config["train"]["merge_count"] = 1
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(config))
    result = run(snakemake_only, "snakemake", "-n", "--configfile", str(path))
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert f"{path}: " in output and "train.merge_count" in output
    assert "Building DAG of jobs" not in output


@pytest.mark.slow
@pytest.mark.env_build
def test_a_yaml_syntax_error_names_the_line(snakemake_only, tmp_path):
    # The default profile's check, which runs before Snakemake reads the file.
    text = (ROOT / "config/test.yaml").read_text()
    path = tmp_path / "broken.yaml"
    path.write_text(text.replace("  max_rounds: 3 ", "  max_rounds: [3 ", 1))
    result = run(snakemake_only, "snakemake", "-n", "--configfile", str(path))
    assert result.returncode != 0
    assert f"{path}: not valid YAML: line " in result.stderr, result.stderr
