"""adloco.core.paths: the exact layout of every path function for one experiment, run and seed."""

from __future__ import annotations

from pathlib import Path

import pytest

from adloco.core import paths

EXPERIMENT, RUN = "paper", "adloco-4x"


def test_roots():
    assert paths.RAW == Path("data/raw")
    assert paths.TOKENIZED == Path("data/tokenized")
    assert paths.RESULTS == Path("results")
    assert paths.LOGS == Path("logs")


@pytest.mark.parametrize(
    ("function", "args", "expected"),
    [
        (paths.tokenized_dir, ("c4",), "data/tokenized/c4"),
        (paths.experiment_dir, (EXPERIMENT,), "results/paper"),
        (paths.calibration_dir, (EXPERIMENT,), "results/paper/calibration"),
        (paths.calibration_file, (EXPERIMENT, "h100"), "results/paper/calibration/h100.json"),
        (paths.device_calibration_file, ("cal/x", "a100"), "cal/x/a100.json"),
        (paths.device_calibration_file, (Path("/abs/cal"), "cpu"), "/abs/cal/cpu.json"),
        (paths.variance_dir, (EXPERIMENT,), "results/paper/variance"),
        (paths.runs_dir, (EXPERIMENT,), "results/paper/runs"),
        (paths.run_dir, (EXPERIMENT, RUN, 3), "results/paper/runs/adloco-4x/seed3"),
        (paths.run_dir, (EXPERIMENT, RUN, "{seed}"), "results/paper/runs/adloco-4x/seed{seed}"),
        (paths.checkpoint_dir, (EXPERIMENT, RUN, 0), "results/paper/checkpoints/adloco-4x/seed0"),
        (paths.run_seeds_dir, (EXPERIMENT, RUN), "results/paper/runs/adloco-4x"),
        (paths.run_checkpoints_dir, (EXPERIMENT, RUN), "results/paper/checkpoints/adloco-4x"),
        (paths.run_live_dir, (EXPERIMENT, RUN), "logs/paper/live/adloco-4x"),
        (paths.live_dir, (EXPERIMENT, RUN, 2), "logs/paper/live/adloco-4x/seed2"),
        (paths.base_dir, (EXPERIMENT,), "results/paper/base"),
        (paths.base_checkpoint_dir, (EXPERIMENT,), "results/paper/checkpoints/base"),
        (paths.report_dir, (EXPERIMENT,), "results/paper/report"),
        (paths.logs_dir, (EXPERIMENT,), "logs/paper"),
        (paths.data_logs_dir, ("c4",), "logs/data/c4"),
    ],
)
def test_layout(function, args, expected):
    result = function(*args)
    assert isinstance(result, Path)
    assert result.as_posix() == expected


def test_seed_folder_name():
    assert paths.seed_dir_name(0) == "seed0"
    assert paths.seed_dir_name(12) == "seed12"
    assert paths.seed_dir_name("{seed}") == "seed{seed}"  # a Snakemake wildcard


def test_checkpoints_live_outside_the_run_folder():
    # Snakemake removes a failed job's declared outputs (the run folder); the
    # checkpoints must survive that for a re-run to resume.
    run = paths.run_dir(EXPERIMENT, RUN, 1)
    checkpoint = paths.checkpoint_dir(EXPERIMENT, RUN, 1)
    assert run not in checkpoint.parents and checkpoint not in run.parents
    assert paths.runs_dir(EXPERIMENT) not in checkpoint.parents
    assert paths.experiment_dir(EXPERIMENT) in checkpoint.parents


def test_experiments_never_share_a_folder():
    functions = [
        paths.experiment_dir,
        paths.calibration_dir,
        paths.variance_dir,
        paths.runs_dir,
        paths.base_dir,
        paths.base_checkpoint_dir,
        paths.report_dir,
        paths.logs_dir,
    ]
    a = {f(EXPERIMENT) for f in functions}
    b = {f("other") for f in functions}
    assert len(a) == len(functions) and not a & b
    assert paths.run_dir("a", RUN, 0) != paths.run_dir("b", RUN, 0)
