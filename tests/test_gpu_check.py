"""scripts/gpu-check.sh: the runner's statuses, the readers' checks, the quickest form end to end.

The quick form runs every step of the GPU check on this machine's CPU at the
test preset's sizes, so that the script a GPU lease depends on cannot rot
between leases.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts" / "gpu_check"))

import configs  # noqa: E402
import figures  # noqa: E402
from runner import Runner, Step  # noqa: E402

from adloco.model.llama import MICROLLAMA_ARCHITECTURE  # noqa: E402


def make_runner(tmp_path: Path, budget_s: float = 60) -> Runner:
    out, work = tmp_path / "out", tmp_path / "work"
    out.mkdir()
    work.mkdir()
    return Runner(out, work, budget_s, {"device": "cpu"})


def py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_a_passing_step_keeps_its_figures_and_the_json_is_written_after_it(tmp_path):
    runner = make_runner(tmp_path)
    entry = runner.run(Step("one", py("print('hello')"), 30, lambda: {"x": 3}))
    assert entry["status"] == "passed" and entry["figures"] == {"x": 3}
    saved = json.loads(runner.json.read_text())
    assert saved["steps"]["one"]["figures"] == {"x": 3} and saved["device"] == "cpu"
    assert "hello" in runner.log.read_text()


def test_a_failing_command_is_failed_with_its_status_and_last_lines(tmp_path):
    runner = make_runner(tmp_path)
    entry = runner.run(Step("bad", py("import sys; print('boom'); sys.exit(3)"), 30))
    assert entry["status"] == "failed"
    assert entry["message"].splitlines()[0] == "exit status 3" and "boom" in entry["message"]


def test_a_refused_figure_fails_the_step_with_the_reason(tmp_path):
    def collect():
        raise AssertionError("validation loss did not fall")

    entry = make_runner(tmp_path).run(Step("check", py("pass"), 30, collect))
    assert entry["status"] == "failed"
    assert entry["message"] == "AssertionError: validation loss did not fall"


@pytest.mark.heavy
def test_a_step_past_its_limit_is_cut_with_every_process_it_started(tmp_path):
    pid_file = tmp_path / "child.pid"
    # The step starts a grandchild that would outlive a plain kill of the step.
    code = (
        "import subprocess, sys, time; "
        f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        f"open({str(pid_file)!r}, 'w').write(str(p.pid)); time.sleep(60)"
    )
    runner = make_runner(tmp_path)
    start = time.monotonic()
    entry = runner.run(Step("slow", py(code), 2.0))
    assert entry["status"] == "cut" and "its limit" in entry["message"]
    assert time.monotonic() - start < 30
    pid = int(pid_file.read_text())
    for _ in range(50):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the step's child {pid} outlived the cut")
    # The next step still runs.
    assert runner.run(Step("after", py("pass"), 30))["status"] == "passed"


@pytest.mark.heavy
def test_a_step_whose_need_did_not_pass_is_skipped_and_the_budget_cuts_the_rest(tmp_path):
    runner = make_runner(tmp_path, budget_s=3)
    runner.run(Step("a", py("import sys; sys.exit(1)"), 30))
    skipped = runner.run(Step("b", py("pass"), 30, needs=("a",)))
    assert skipped == {"status": "skipped", "message": "needs a, which did not pass"}
    cut = runner.run(Step("c", py("import time; time.sleep(60)"), 30))
    assert cut["status"] == "cut" and "overall budget" in cut["message"]
    late = runner.run(Step("d", py("pass"), 30))
    assert late["status"] == "cut" and late["message"].startswith("the check's overall budget")
    assert [e["status"] for e in json.loads(runner.json.read_text())["steps"].values()] == [
        "failed",
        "skipped",
        "cut",
        "cut",
    ]


def write_rows(run: Path, rows: list[dict]) -> Path:
    run.mkdir(parents=True, exist_ok=True)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


def row(rnd: int, val: float | None, train: float = 5.0, trainer: int = 0, tokens: int = 100):
    return {
        "round": rnd,
        "trainer": trainer,
        "train_loss": train,
        "val_loss": val,
        "wall_time_s": 2.0 * rnd,
        "tokens": tokens,
        "requested_batch": 4,
        "switch_mode": "plain",
    }


def test_training_figures_take_the_best_trainer_of_the_first_and_last_evaluation(tmp_path):
    run = write_rows(
        tmp_path / "r",
        [row(1, 6.0), row(1, 5.5, trainer=1), row(2, None), row(3, 4.0), row(3, 4.5, trainer=1)],
    )
    got = figures.training(run)
    assert (got["val_loss_first"], got["val_loss_last"], got["rounds"]) == (5.5, 4.0, 3)
    assert got["tokens"] == 500 and got["tokens_per_s"] == pytest.approx(500 / 6.0, abs=0.05)


def test_training_refuses_a_loss_that_does_not_fall_or_is_not_finite(tmp_path):
    flat = write_rows(tmp_path / "flat", [row(1, 5.0), row(2, 5.0)])
    with pytest.raises(AssertionError, match="did not fall"):
        figures.training(flat)
    nan = write_rows(tmp_path / "nan", [row(1, 5.0), row(2, 4.0, train=math.nan)])
    with pytest.raises(AssertionError, match="non-finite"):
        figures.training(nan)


def test_two_processes_must_match_one_within_the_tolerance(tmp_path):
    one = write_rows(tmp_path / "one", [row(1, 5.0), row(2, 4.0)])
    close = write_rows(tmp_path / "close", [row(1, 5.0 * (1 + 1e-7)), row(2, 4.0)])
    assert figures.same_run(one, close)["max_relative_loss_difference"] == pytest.approx(1e-7)
    far = write_rows(tmp_path / "far", [row(1, 5.0), row(2, 4.001)])
    with pytest.raises(AssertionError, match="relative"):
        figures.same_run(one, far)


def test_a_stacked_run_must_end_near_its_sequential_run(tmp_path):
    seq = write_rows(tmp_path / "seq", [row(1, 5.0), row(2, 4.0)])
    near = write_rows(tmp_path / "near", [row(1, 5.0), row(2, 4.01)])
    got = figures.vectorized_training(near, seq)
    assert got["relative_difference_to_sequential"] == pytest.approx(0.0025)
    assert got["speed_vs_sequential"] == pytest.approx(1.0)
    far = write_rows(tmp_path / "far", [row(1, 5.0), row(2, 4.1)])
    with pytest.raises(AssertionError, match="tolerance"):
        figures.vectorized_training(far, seq)


def test_the_configs_keep_the_shipped_runs_and_take_the_paper_shape():
    paper = configs.paper_shape_config("full", "cuda")
    assert {k: paper["model"][k] for k in MICROLLAMA_ARCHITECTURE} == MICROLLAMA_ARCHITECTURE
    assert paper["data"]["seq_len_tokens"] == 512
    assert paper["data"]["tokenizer"]["kind"] == "mistral-v1"
    assert paper["cluster"]["nodes_per_device"] == 4 and paper["train"]["initial_batch"] == 1
    assert (
        paper["train"]["autocast_dtype"] == "bfloat16"
        and paper["calibration"]["dtype"] == "bfloat16"
    )
    device = paper["cluster"]["devices"][0]
    assert (device["kind"], device["memory_gib"], device["step_time"]["model"]) == (
        "cuda",
        80.0,
        "measured",
    )
    default = configs.default_config("toy", "cpu")
    assert default["train"]["autocast_dtype"] is None
    assert set(default["runs"]) == {"adloco", "diloco"}


@pytest.mark.heavy
@pytest.mark.reliability("messages")
def test_relative_folders_are_the_callers_not_the_repositorys(tmp_path):
    # Issue 45: `--out relout` run from another folder wrote relout/ in the repository root.
    caller = tmp_path / "elsewhere"
    caller.mkdir()
    done = subprocess.run(
        [str(ROOT / "scripts" / "gpu-check.sh"), "--device", "cpu", "--out", "relout",
         "--work", "relwork", "--list"],
        cwd=caller, capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "PYTHON": sys.executable},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (caller / "relout").is_dir() and (caller / "relwork").is_dir()
    assert not (ROOT / "relout").exists() and not (ROOT / "relwork").exists()


@pytest.mark.gpu_check
def test_the_quick_form_runs_every_step_and_each_passes(tmp_path):
    """The whole check at the test preset's sizes: every step passes, every figure is there."""
    out = tmp_path / "out"
    done = subprocess.run(
        [
            str(ROOT / "scripts" / "gpu-check.sh"),
            "--device",
            "cpu",
            "--size",
            "quick",
            "--out",
            str(out),
            "--work",
            str(tmp_path / "work"),
            "--prepared",
            str(tmp_path / "none"),
            "--threads",
            "1",
            # The budget's cut is tested above; here a slow or busy CI machine must not cut a step.
            "--budget-s",
            "1800",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHON": sys.executable},
    )
    report = json.loads((out / "gpu-check.json").read_text())
    statuses = {name: e["status"] for name, e in report["steps"].items()}
    assert done.returncode == 0, done.stdout + done.stderr + (out / "gpu-check.log").read_text()
    assert set(statuses.values()) == {"passed"} and len(statuses) == 15, statuses
    steps = report["steps"]
    assert steps["environment"]["figures"]["packages"]["torch"]
    assert steps["calibrate-paper-shape"]["figures"]["max_batch"] >= 1
    assert steps["data-paper-shape"]["figures"]["seq_len_tokens"] == 32
    bench = steps["bench-default"]["figures"]
    assert bench["slots"] and bench["engine_vs_plain"] > 0
    assert steps["distributed-2-processes"]["figures"]["max_relative_loss_difference"] <= 1e-5
    assert sorted(p.name for p in out.iterdir()) == [
        "calibration-default.json",
        "calibration-paper-shape.json",
        "gpu-check.json",
        "gpu-check.log",
    ]
