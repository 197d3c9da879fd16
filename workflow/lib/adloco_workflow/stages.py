"""The pipeline's stages in one table: each one's ``adloco`` command, inputs,
outputs and the configuration keys it depends on.

The Snakemake rules (workflow/rules/*.smk) take their ``settings`` params
from :func:`snakemake_params`; dvc.yaml is generated from the table
(``python workflow/lib/adloco_workflow/dvc_yaml.py``). Paths are DVC templates
built with :mod:`adloco.core.paths` (``${experiment}``, ``${data.dataset}``: values
of params.yaml); ``{run}`` and ``{device}`` are the wildcards of a stage that
runs once per run or device (Snakemake's wildcards, DVC's ``foreach``).
Standard library and :mod:`adloco.core.paths` only: Snakemake reads it while it
parses the workflow.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from adloco.core import paths

# The parameters file DVC reads (params.yaml, made by `adloco dvc-params`).
PARAMS_FILE = "params.yaml"
EXPERIMENT = "${experiment}"
TOKENIZED = str(paths.tokenized_dir("${data.dataset}"))
RAW = "${data.raw_dir}"
BASE = str(paths.base_dir(EXPERIMENT))
CALIBRATION = str(paths.calibration_dir(EXPERIMENT))
VARIANCE = paths.variance_dir(EXPERIMENT)
RUNS = str(paths.runs_dir(EXPERIMENT))
REPORT = paths.report_dir(EXPERIMENT)
# A run's folders, each holding its seed folders.
RUN_OUT = str(paths.run_seeds_dir(EXPERIMENT, "{run}"))
RUN_CHECKPOINTS = str(paths.run_checkpoints_dir(EXPERIMENT, "{run}"))
RUN_LIVE = str(paths.run_live_dir(EXPERIMENT, "{run}"))


@dataclass(frozen=True)
class Path_:
    """A stage's input or output: its path and DVC's flags for it."""

    path: str
    # Comment lines written above it in dvc.yaml.
    note: tuple[str, ...] = ()
    # DVC keeps it when the stage re-runs (a resumable checkpoint folder).
    persist: bool = False
    # False: git keeps it, not DVC's cache.
    cache: bool = True


@dataclass(frozen=True)
class Key:
    """A configuration key a stage depends on: its dotted name (``{run}`` a wildcard)."""

    name: str
    note: tuple[str, ...] = ()
    # Read only by DVC's stage (one per run, every seed), not by a Snakemake job (one seed).
    dvc_only: bool = False


@dataclass(frozen=True)
class Stage:
    """One stage: ``adloco <name>`` with ``args`` (flag, value), as DVC runs it."""

    name: str
    args: tuple[tuple[str, str], ...]
    keys: tuple[Key, ...]
    deps: tuple[Path_, ...] = ()
    outs: tuple[Path_, ...] = ()
    metrics: tuple[Path_, ...] = ()
    plots: tuple[Path_, ...] = ()
    # DVC's `foreach` and the DVC value of each wildcard.
    foreach: str | None = None
    wildcards: dict[str, str] = field(default_factory=dict)
    note: tuple[str, ...] = ()


def _keys(*names: str) -> tuple[Key, ...]:
    return tuple(Key(name) for name in names)


def _files(folder, *names: str) -> tuple[Path_, ...]:
    return tuple(Path_(str(folder / name)) for name in names)


# A stage with a persistent output is never in DVC's run cache, so its other
# folder outputs persist too at no cost: DVC then leaves a user's file there for
# the stage to refuse rather than deleting it first (docs/workflow.md, DVC).
KEPT_NOTE = (
    "Not emptied by DVC before the stage runs (a stage with a persistent output",
    "is in no run cache anyway): a file of yours there meets adloco's refusal",
    "instead (adloco dvc-check finds it first).",
)

PREPARE_CORPUS = Stage(
    name="prepare-corpus",
    args=(("--config", PARAMS_FILE), ("--out", RAW)),
    keys=_keys("data.source", "data.raw_dir", "data.max_documents"),
    outs=(
        Path_(
            RAW,
            note=(
                "Not emptied by DVC before the stage runs: data.raw_dir may name a folder",
                "the user owns, and adloco itself refuses one that holds files it did not",
                "write (docs/reliability.md), where DVC would delete them first.",
            ),
            persist=True,
        ),
    ),
)

TOKENIZE = Stage(
    name="tokenize",
    args=(("--config", PARAMS_FILE), ("--raw", RAW), ("--out", TOKENIZED)),
    keys=_keys("seed", "data"),
    deps=(Path_(RAW),),
    outs=(Path_(TOKENIZED),),
)

PRETRAIN = Stage(
    name="pretrain",
    args=(
        ("--config", PARAMS_FILE),
        ("--data", TOKENIZED),
        ("--out", BASE),
        ("--checkpoints", str(paths.base_checkpoint_dir(EXPERIMENT))),
        ("--live", str(paths.base_live_dir(EXPERIMENT))),
    ),
    keys=_keys("seed", "model", "pretrain", "train.eval_sequences", "train.eval_batch"),
    deps=(Path_(TOKENIZED),),
    outs=(
        Path_(BASE, note=KEPT_NOTE, persist=True),
        Path_(
            str(paths.base_checkpoint_dir(EXPERIMENT)),
            note=("Kept when the stage re-runs, so that pretraining resumes.",),
            persist=True,
        ),
    ),
)

CALIBRATE = Stage(
    name="calibrate",
    args=(
        ("--config", PARAMS_FILE),
        ("--data", TOKENIZED),
        ("--device", "{device}"),
        ("--out", str(paths.calibration_file(EXPERIMENT, "{device}"))),
    ),
    keys=(
        *_keys("seed", "model", "cluster", "calibration"),
        Key(
            "train.inner_optimizer",
            note=("The step it times is a training step: the inner optimizer, and clipping.",),
        ),
        Key("train.grad_clip_norm"),
    ),
    deps=(
        Path_(TOKENIZED),
        Path_(
            "config/devices",
            note=(
                "The measured records a device's clock may be mapped from",
                "(step_time.model: measured_record): editing one re-runs calibration.",
            ),
        ),
    ),
    outs=(Path_(str(paths.calibration_file(EXPERIMENT, "{device}"))),),
    foreach="${cluster.devices}",
    wildcards={"device": "${item.name}"},
)

VARIANCE_STAGE = Stage(
    name="variance",
    args=(
        ("--config", PARAMS_FILE),
        ("--data", TOKENIZED),
        ("--base", BASE),
        ("--out", str(VARIANCE)),
    ),
    keys=(
        *_keys("seed", "model", "variance"),
        Key("cluster", note=("The scalar-vs-pooled comparison splits groups over the slots.",)),
        *_keys("train.stats_microbatches", "train.stats_steps"),
    ),
    deps=(Path_(TOKENIZED), Path_(BASE)),
    outs=(
        *_files(VARIANCE, "variance.json", "per_batch.csv", "draws.csv"),
        Path_(
            str(VARIANCE / ".adloco-output.json"),
            note=(
                "adloco's list of the files it wrote into the folder (adloco.core.io): the",
                "report reads the folder, so a pulled one must hold it too.",
            ),
        ),
    ),
    plots=_files(VARIANCE, "deviations.png"),
)

TRAIN = Stage(
    name="train",
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
    keys=(
        Key("seed"),
        Key(
            "seeds",
            note=("Every seed of the run (a Snakemake job trains one).",),
            dvc_only=True,
        ),
        *_keys("model", "cluster", "train", "runs.{run}"),
    ),
    deps=(Path_(TOKENIZED), Path_(CALIBRATION), Path_(BASE)),
    outs=(
        Path_(
            RUN_OUT,
            note=("seed<seed>/metrics.jsonl, summary.json and final/ of each seed.", *KEPT_NOTE),
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
)

REPORT_STAGE = Stage(
    name="report",
    args=(
        ("--config", PARAMS_FILE),
        ("--runs", RUNS),
        ("--calibration", CALIBRATION),
        ("--variance", str(VARIANCE)),
        ("--data", TOKENIZED),
        ("--base", BASE),
        ("--out", str(REPORT)),
    ),
    keys=_keys("seeds", "runs", "report"),
    deps=(
        *(Path_(p) for p in (RUNS, CALIBRATION, str(VARIANCE), TOKENIZED, BASE)),
        Path_(
            "config/tuning.json",
            note=("report.tuning's record (a preset without one does not read it)",),
        ),
    ),
    outs=(
        *_files(REPORT, "index.html", "claims.json", "summary.csv", "curves.csv"),
        *_files(REPORT, "ladder.csv", "regimes.csv", "noise_scale.csv", ".adloco-output.json"),
        Path_(
            str(REPORT / "median_curves.csv"),
            note=(
                "The curves of the top-level plots below. Like metrics.json, kept in",
                "git (cache: false; .gitignore lets these two through), so that",
                "`dvc exp show` and `dvc plots diff` read them at any commit.",
            ),
            cache=False,
        ),
    ),
    metrics=(
        Path_(
            str(REPORT / "metrics.json"),
            note=(
                "Numbers only, under short keys: the main target, each headline",
                "verdict's ratio and p, each run's median final perplexity and seeds.",
            ),
            cache=False,
        ),
    ),
    plots=(
        Path_(
            str(paths.report_figures_dir(EXPERIMENT)),
            note=("The report's figures (index.html shows them with their captions).",),
        ),
    ),
)

STAGES = (PREPARE_CORPUS, TOKENIZE, PRETRAIN, CALIBRATE, VARIANCE_STAGE, TRAIN, REPORT_STAGE)


def snakemake_params() -> dict[str, list[str]]:
    """Each stage's configuration keys as a Snakemake job reads them (``{run}`` a wildcard)."""
    return {s.name: [k.name for k in s.keys if not k.dvc_only] for s in STAGES}
