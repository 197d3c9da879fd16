"""``adloco train``: one run for one seed, or each of its seeds (adloco.train_run.train)."""

from __future__ import annotations

import argparse
import math

from adloco.core import paths
from adloco.stages.common import (
    BASE,
    CALIBRATION,
    CONFIG,
    EXP,
    EXPERIMENT,
    KEPT_NOTE,
    PARAMS_FILE,
    RUN,
    SEED,
    TOKENIZED,
    progress,
    threads,
)
from adloco.stages.declaration import Dvc, Key, Path_, Stage, arg, keys

# A run's folders, each holding its seed folders.
RUN_OUT = str(paths.run_seeds_dir(EXPERIMENT, "{run}"))
RUN_CHECKPOINTS = str(paths.run_checkpoints_dir(EXPERIMENT, "{run}"))
RUN_LIVE = str(paths.run_live_dir(EXPERIMENT, "{run}"))


def run(args: argparse.Namespace) -> int:
    from adloco.train_run import train

    return train(STAGE.request_from(args))


def seed(text: str) -> int | str:
    """A training seed: an integer the configuration would take (0 to 2**32 - 1), or ``all``."""
    from adloco.config.checks import seed_problem

    if text == "all":
        return text
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: an integer seed, or all") from None
    problem = seed_problem(value)
    if problem is not None:
        raise argparse.ArgumentTypeError(f"{problem}, or all")
    return value


def seconds(text: str) -> float:
    """A positive, finite number of seconds."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(
            f"{text!r}: a positive, finite number of seconds (default 1800)"
        )
    return value


STAGE = Stage(
    name="train",
    help="train one run (AdLoCo, DiLoCo, LocalSGD or an ablation) for one seed",
    description="Train a configured run, writing metrics.jsonl, summary.json and the final model, "
    "checkpointing every train.checkpoint_every_rounds rounds; re-running the same "
    "command after a kill resumes, while a finished run's checkpoint is set aside and "
    "the run trains again.",
    arguments=(
        CONFIG,
        # --run-name: torchrun's own parser rejects a bare --run in the script's
        # arguments as an ambiguous abbreviation of its --run-path.
        arg(
            "--run",
            "--run-name",
            dest="run",
            required=True,
            help="run name from `runs` (--run-name under torchrun)",
        ),
        arg(
            "--seed",
            type=seed,
            required=True,
            help="training seed, or `all`: each of the run's seeds in seed<seed>/ of --out and "
            "--checkpoints (DVC's stage per run)",
        ),
        arg("--data", required=True, help="tokenized data folder"),
        arg(
            "--calibration",
            required=True,
            help=f"folder of calibration JSON files, {paths.calibration_dir(EXP)}",
        ),
        arg(
            "--base",
            default=None,
            help=f"the base model folder every run starts from, {paths.base_dir(EXP)} "
            "(required when model.source is base)",
        ),
        arg("--out", required=True, help=f"run folder, {paths.run_dir(EXP, RUN, SEED)}"),
        arg(
            "--checkpoints",
            required=True,
            help="checkpoint folder, kept when a job fails: "
            f"{paths.checkpoint_dir(EXP, RUN, SEED)}",
        ),
        *progress(f"{paths.live_dir(EXP, RUN, SEED)} (seed<seed>/ of it with --seed all)"),
        threads("Snakemake passes the job's; per process under torchrun"),
        arg(
            "--dist-timeout-s",
            type=seconds,
            default=None,
            help="under torchrun: seconds a collective may wait for the other processes before "
            "the run fails (default: $ADLOCO_DIST_TIMEOUT_S, else 1800)",
        ),
    ),
    run=run,
    request="adloco.train_run.TrainRequest",
    out_dirs=("out", "checkpoints"),
    trains=True,
    keys=(
        Key("seed"),
        Key(
            "seeds",
            note=("Every seed of the run (a Snakemake job trains one).",),
            dvc_only=True,
        ),
        *keys("model", "cluster", "train", "runs.{run}"),
    ),
    dvc=Dvc(
        args=(
            ("--config", PARAMS_FILE),
            ("--run-name", "{run}"),
            ("--seed", "all"),
            ("--data", TOKENIZED),
            ("--calibration", CALIBRATION),
            ("--base", BASE),
            ("--out", RUN_OUT),
            ("--checkpoints", RUN_CHECKPOINTS),
            ("--live", RUN_LIVE),
        ),
        deps=(Path_(TOKENIZED), Path_(CALIBRATION), Path_(BASE)),
        outs=(
            Path_(
                RUN_OUT,
                note=(
                    "seed<seed>/metrics.jsonl, summary.json and final/ of each seed.",
                    *KEPT_NOTE,
                ),
                persist=True,
            ),
            Path_(
                RUN_CHECKPOINTS,
                note=("Kept when the stage re-runs, so that training resumes.",),
                persist=True,
            ),
        ),
        foreach="${runs}",
        wildcards={"run": "${key}"},
        note=(
            "One stage per run, training each of the run's seeds (its own `seeds`, else",
            "the top-level ones) in turn: a template cannot take a list nested in",
            "`runs`, so `--seed all` does. A stage killed part-way re-writes the seeds it",
            "had finished from their finished checkpoints and resumes the one it was on.",
        ),
    ),
)
