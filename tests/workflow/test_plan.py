"""What the rules read (adloco_workflow.plan, .resources), on hand-worked values.

The dry runs of tests/workflow/test_snakemake.py and test_slurm_profile.py
check the same functions through Snakemake itself.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from adloco.config import Config
from adloco_workflow import plan
from adloco_workflow.resources import Resources

ROOT = Path(__file__).resolve().parents[2]


def test_the_command_lines_file_wins_and_reads_relative_to_the_working_folder(monkeypatch):
    monkeypatch.chdir(ROOT)
    default = "config/config.yaml"
    assert plan.config_file({}, [], [default]) == default
    assert plan.config_file({}, [ROOT / "config/test.yaml"], ["x", default]) == "config/test.yaml"
    # A file outside the working folder keeps its absolute path.
    assert plan.config_file({}, ["/elsewhere/my.yaml"], [default]) == "/elsewhere/my.yaml"


def test_config_overrides_and_two_files_are_refused_in_one_line():
    with pytest.raises(plan.PlanError, match=r"^--config seed, train: the configuration file"):
        plan.config_file({"train": {}, "seed": 3}, [], ["config/config.yaml"])
    with pytest.raises(plan.PlanError, match=r"^--configfile a.yaml b.yaml: pass exactly one"):
        plan.config_file({}, ["a.yaml", "b.yaml"], [])


def test_wildcard_patterns_match_exactly_the_names():
    pattern = plan.alternatives(["a", "a.b"])
    assert pattern == r"a|a\.b"
    assert [n for n in ("a", "a.b", "axb", "ab") if re.fullmatch(pattern, n)] == ["a", "a.b"]
    assert re.fullmatch(plan.alternatives([]), "") is None


def test_settings_params_are_in_sorted_key_order():
    value = {"b": [{"y": 1, "x": 2}], "a": 0}
    assert repr(plan.canonical(value)) == "{'a': 0, 'b': [{'x': 2, 'y': 1}]}"


def test_a_train_jobs_params_are_its_runs_section_and_the_shared_ones(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no folder of the test preset exists here
    config = yaml.safe_load((ROOT / "config/test.yaml").read_text())
    config["runs"]["adloco-b"] = config["runs"]["adloco"]
    settings = plan.settings("test.yaml", config)
    rules = plan.Plan("test.yaml", config, settings)
    values = rules.stage_params("train", SimpleNamespace(items=lambda: {"run": "adloco-b"}.items()))
    assert list(values) == ["seed", "model", "cluster", "train", "runs.adloco-b"]
    assert values["runs.adloco-b"] == plan.canonical(config["runs"]["adloco-b"])
    assert rules.config_file(None, None) == "test.yaml"
    assert rules.run_file("summary.json", "adloco-b", "0") == (
        f"results/{settings.experiment}/runs/adloco-b/seed0/summary.json"
    )


def cluster(processes: int, *devices) -> SimpleNamespace:
    return SimpleNamespace(devices=list(devices), processes_per_machine=processes)


def device(name, kind, count=1, memory_gib=1.5, gpu_model=None) -> SimpleNamespace:
    return SimpleNamespace(
        name=name, kind=kind, count=count, memory_gib=memory_gib, gpu_model=gpu_model
    )


def test_cpu_jobs_ask_for_the_simulated_devices_memory_and_no_gpu():
    jobs = Resources(cluster(1, device("cpu-sim", "cpu", count=2)), environ={})
    cpu = SimpleNamespace(device="cpu-sim")
    assert jobs.cpu_budget_mb() == round(2 * 1.5 * 1024) == 3072
    assert jobs.calibrate_mem_mb(cpu) == 4000 + 1536
    assert (jobs.device_gpu(cpu), jobs.cluster_gpu(cpu), jobs.train_gpu(cpu)) == (0, 0, 0)
    assert (jobs.calibrate_threads(cpu), jobs.train_threads(cpu)) == (1, 1)
    assert jobs.train_launcher(cpu) == "" and jobs.cluster_gpu_model(cpu) is None


def test_cuda_jobs_ask_for_one_gpu_per_process_of_the_configured_model():
    devices = (
        device("cpu-sim", "cpu"),
        device("h100", "cuda"),
        device("a100", "cuda", gpu_model="a100"),
    )
    jobs = Resources(cluster(2, *devices), environ={"ADLOCO_GPU_MODEL": "h100"})
    h100, a100 = SimpleNamespace(device="h100"), SimpleNamespace(device="a100")
    assert (jobs.device_gpu(h100), jobs.device_gpu_model(h100)) == (1, "h100")
    assert jobs.device_gpu_model(a100) == "a100"  # the device's own model first
    assert jobs.calibrate_mem_mb(h100) == 4000  # nothing simulated in host memory
    assert (jobs.calibrate_threads(h100), jobs.train_threads(h100)) == (4, 4 * 2)
    assert jobs.train_gpu(h100) == 2 and jobs.cluster_gpu_model(h100) == "h100"
    assert jobs.train_launcher(h100) == "torchrun --standalone --nproc_per_node 2 --no-python "
    assert jobs.device_gpu_model(SimpleNamespace(device="cpu-sim")) is None


def test_a_folder_adloco_did_not_write_stops_the_plan_naming_the_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = yaml.safe_load((ROOT / "config/test.yaml").read_text())
    raw = Path(config["data"]["raw_dir"])
    raw.mkdir(parents=True)
    (raw / "notes.txt").write_text("mine")
    settings = plan.settings("test.yaml", config)
    assert isinstance(settings, Config)
    with pytest.raises(plan.PlanError, match=r"^test.yaml: data.raw_dir .*notes.txt"):
        plan.Plan("test.yaml", config, settings)
    assert os.listdir(raw) == ["notes.txt"]
