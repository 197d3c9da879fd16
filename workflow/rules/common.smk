# Helpers of the workflow, shared by rules/*.smk. They decide which
# configuration file the jobs read, validate it before any job starts, list
# the devices, runs and seeds that expand the DAG and the configuration keys
# each stage depends on, and size the jobs that use a GPU. Rules live in the
# other files.

import os
import re
import sys

from snakemake.exceptions import WorkflowError
from snakemake.logging import logger
from snakemake.utils import validate

# The checks below run the checkout's own modules (adloco.config, .paths,
# .snakemake_lock), which need nothing beyond the standard library, jsonschema
# and PyYAML, two of Snakemake's own dependencies: a host with Snakemake alone
# parses, validates and plans the workflow, and the jobs run `adloco` from the
# rules' environment (workflow/envs/adloco.yaml). The checkout comes first on
# the path, so the checks are those of this checkout even where another copy
# of adloco is installed. (A copy of the workflow without src/ uses the
# installed package.)
def _checkout_src():
    """src/ of this checkout: beside the main Snakefile (./Snakefile) or above it (workflow/)."""
    here = os.path.dirname(os.path.abspath(workflow.main_snakefile))
    for root in (here, os.path.dirname(here)):
        if os.path.isfile(os.path.join(root, "src", "adloco", "__init__.py")):
            return os.path.join(root, "src")
    return None


SRC_DIR = _checkout_src()
if SRC_DIR and SRC_DIR not in sys.path:
    sys.path.insert(0, SRC_DIR)

import adloco.config
import adloco.io
from adloco import paths
import adloco.snakemake_lock
import adloco.snakemake_preflight

# `.venv/bin/snakemake` run without the virtual environment on PATH: the jobs
# still run the `adloco` installed beside it (with --use-conda, the rule's
# environment, activated in each job's shell, comes first).
adloco.snakemake_preflight.put_adloco_on_path()

# A Snakemake killed mid-run leaves its lock (.snakemake/locks) behind. Parsing
# comes before Snakemake checks the lock, so release it here when no other
# Snakemake or adloco process can hold it (adloco/snakemake_lock.py): re-running
# the same command then resumes. Only in the main process: the Snakemake
# processes that run cluster jobs must not touch the lock.
if workflow.is_main_process:
    adloco.snakemake_lock.on_parse(
        os.getcwd(), unlock="--unlock" in sys.argv, log=logger.warning
    )

# Configuration keys each stage depends on. They are the rules' `params`, so
# Snakemake re-runs a job when one of them changes (the params rerun trigger);
# dvc.yaml lists the same keys under `params` (tests/workflow checks it). The
# path of the configuration file is not tracked (see config_file): a copy of
# the file under another name, with the same settings, re-runs nothing.
STAGE_PARAMS = {
    "prepare-corpus": ["data.source", "data.raw_dir", "data.max_documents"],
    "tokenize": ["seed", "data"],
    "pretrain": ["seed", "model", "pretrain", "train.eval_sequences", "train.eval_batch"],
    # The step it times is a training step: the inner optimizer, and clipping.
    "calibrate": [
        "seed",
        "model",
        "cluster",
        "calibration",
        "train.inner_optimizer",
        "train.grad_clip_norm",
    ],
    # The scalar-vs-pooled comparison splits groups over the cluster's slots.
    "variance": [
        "seed",
        "model",
        "variance",
        "cluster",
        "train.stats_microbatches",
        "train.stats_steps",
    ],
    "train": ["seed", "model", "cluster", "train", "runs.{run}"],
    "report": ["seeds", "runs", "report"],
}


def _config_file():
    """The one YAML file every `adloco` command of this run reads."""
    if workflow.config_settings.config:
        keys = ", ".join(sorted(workflow.config_settings.config))
        raise WorkflowError(
            f"--config {keys}: the configuration file is the single source of every "
            "setting (the adloco commands read the file, not Snakemake's config); "
            "copy config/config.yaml, edit the copy and pass it with --configfile"
        )
    cli_files = list(workflow.overwrite_configfiles)
    if len(cli_files) > 1:
        raise WorkflowError(
            f"--configfile {' '.join(map(str, cli_files))}: pass exactly one configuration "
            "file; the adloco commands read a single file"
        )
    # A --configfile comes first in workflow.configfiles and the `configfile:`
    # directive's default is appended after it, so the command line wins here.
    path = str(cli_files[0]) if cli_files else str(workflow.configfiles[-1])
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


def _read_config(path):
    # As every adloco command reads it: a syntax error names the line, a
    # duplicate key both lines, and the file must name its experiment.
    try:
        settings = adloco.config.read_yaml(path)
        adloco.config.check_experiment_named(settings, path)
        return settings
    except adloco.config.ConfigError as exc:
        raise WorkflowError(str(exc)) from None


CONFIG_FILE = _config_file()
# Snakemake deep-merges a --configfile into config/config.yaml; the jobs read
# the file alone, so the DAG must be built from the file alone too (otherwise
# runs of the default file would leak into a --configfile with fewer runs).
config.clear()
config.update(_read_config(CONFIG_FILE))
try:
    # adloco's checks first, so that the messages are those of the adloco
    # commands (dotted keys, NaN refused, a hint for 1e-4 written as a string).
    adloco.config.validate(config)
    # The typed configuration the adloco commands read (every run merged with
    # `train` and checked, so that a bad override fails here, naming the run
    # and the key, rather than in its training job). `config` itself stays the
    # file's mapping: the rules' params are its values.
    SETTINGS = adloco.config.Config.from_dict(config)
except adloco.config.ConfigError as exc:
    raise WorkflowError(f"{CONFIG_FILE}: {exc}") from None
validate(config, "../schemas/config.schema.yaml")

DATASET = SETTINGS.data.dataset
RAW_DIR = SETTINGS.data.raw_dir.rstrip("/")
# Snakemake empties an output folder before its job runs (--forcerun, a changed
# setting): the corpus folder, the runs' final models and the report's figures
# must hold nothing adloco did not write there.
try:
    adloco.snakemake_preflight.check_directory_outputs(SETTINGS)
except adloco.io.ForeignFolderError as exc:
    raise WorkflowError(f"{CONFIG_FILE}: {exc}") from None
TOKENIZED_DIR = str(paths.tokenized_dir(DATASET))
MANIFEST = str(paths.manifest_file(TOKENIZED_DIR))
# Everything this configuration computes: results/<experiment>/, logs/<experiment>/.
EXPERIMENT = SETTINGS.experiment
CALIBRATION_DIR = str(paths.calibration_dir(EXPERIMENT))
VARIANCE_DIR = str(paths.variance_dir(EXPERIMENT))
REPORT_DIR = str(paths.report_dir(EXPERIMENT))
BASE_DIR = str(paths.base_dir(EXPERIMENT))
# Every run of a `model.source: base` experiment starts from the base model.
USES_BASE = SETTINGS.model.source == "base"
LOG_DIR = str(paths.logs_dir(EXPERIMENT))
DATA_LOG_DIR = str(paths.data_logs_dir(DATASET))
RUNS = list(SETTINGS.runs)
# Each run's own seeds (runs.<name>.seeds, else the top-level seeds).
RUN_SEEDS = {name: [str(s) for s in SETTINGS.run_seeds(name)] for name in RUNS}
DEVICES = {device.name: device for device in SETTINGS.cluster.devices}
# Every device is calibrated: a fixed max_batch in the config skips only the
# max-batch search, not the step timing the simulated clock needs.
CALIBRATED_DEVICES = list(DEVICES)


def _alternatives(names):
    return "|".join(re.escape(name) for name in names) or "(?!)"


# Wildcard values: exactly the configured names, so a path never matches
# a rule by accident (a run name that is a prefix of another, say).
DEVICE_PATTERN = _alternatives(CALIBRATED_DEVICES)
RUN_PATTERN = _alternatives(RUNS)


def input_folder(key, up=1):
    """A param function: the folder ``up`` levels above input ``key`` (its first path)."""

    def folder(wildcards, input):
        path = input[key] if isinstance(input[key], str) else input[key][0]
        for _ in range(up):
            path = os.path.dirname(path)
        return path

    return folder


def output_folder(key):
    """A param function: the folder of output ``key``."""
    return lambda wildcards, output: os.path.dirname(output[key])


def config_file(wildcards, input):
    """A param function: the configuration file every job's command reads.

    It takes ``input`` (unused) on purpose: Snakemake leaves params derived
    from a job's input out of its params rerun trigger, and the file's *name*
    must not re-run anything (a copy under another name, same settings, is the
    same work). What the file says is tracked: the ``settings`` param.
    """
    return CONFIG_FILE


def _canonical(value):
    # Mappings in sorted key order: Snakemake compares params by their repr, and
    # the same settings written in another order are the same settings.
    if isinstance(value, dict):
        return {k: _canonical(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_canonical(v) for v in value]
    return value


def stage_params(stage, wildcards=None):
    """The configuration values ``stage`` depends on, keyed by dotted key."""
    values = {}
    for template in STAGE_PARAMS[stage]:
        key = template.format(**dict(wildcards.items())) if wildcards else template
        # Two levels at most; a run name may itself contain dots.
        section, _, field = key.partition(".")
        values[key] = _canonical(config[section][field] if field else config[section])
    return values


def calibration_files():
    return [str(paths.calibration_file(EXPERIMENT, device)) for device in CALIBRATED_DEVICES]


def run_file(name, run="{run}", seed="{seed}"):
    """A file of a run folder, results/<experiment>/runs/<run>/seed<seed>/<name>."""
    return str(paths.run_dir(EXPERIMENT, run, seed) / name)


def run_summaries():
    return [run_file("summary.json", run, seed) for run in RUNS for seed in RUN_SEEDS[run]]


def run_metrics():
    return [run_file("metrics.jsonl", run, seed) for run in RUNS for seed in RUN_SEEDS[run]]


def base_input():
    """The base model's summary, as an input of the jobs that start from it."""
    return [f"{BASE_DIR}/base.json"] if USES_BASE else []


def base_arg():
    """`--base <folder>` for the jobs that start from the base model (a list for :q)."""
    return ["--base", BASE_DIR] if USES_BASE else []



def report_tuning_input():
    """The tuning record report.tuning names (config/tuning.json), when it names one."""
    tuning = SETTINGS.report.tuning
    return [tuning] if tuning else []


def report_tuning_output():
    """tuning.json, written by a tuning experiment's report (report.tuning_groups)."""
    groups = SETTINGS.report.tuning_groups
    return [f"{REPORT_DIR}/tuning.json"] if groups else []


def tokenize_raw_arg():
    # The hub source streams records; the other sources read C4-format files.
    # A list, so that `{params.raw:q}` quotes the folder alone.
    return [] if SETTINGS.data.source == "hub" else ["--raw", RAW_DIR]


def tokenize_raw_input():
    return [] if SETTINGS.data.source == "hub" else [RAW_DIR]


def _uses_cuda():
    return any(device.kind == "cuda" for device in DEVICES.values())


# GPU resources. A job that trains or measures on CUDA asks for one GPU; the
# default profile allows one at a time on a local machine (`resources: gpu: 1`),
# the SLURM plugin turns `gpu` and `gpu_model` into `sbatch --gpus=[model:]1`.
# The GPU model (SLURM's GPU type, e.g. a100) is a device's `gpu_model` in the
# config, else ADLOCO_GPU_MODEL from the environment (a cluster-wide choice
# kept out of the experiment's file); only CUDA jobs get one.
GPU_MODEL = os.environ.get("ADLOCO_GPU_MODEL") or None


def _gpu_model(device):
    return (device.gpu_model or GPU_MODEL) if device.kind == "cuda" else None


def device_gpu(wildcards):
    return 1 if DEVICES[wildcards.device].kind == "cuda" else 0


def process_threads(cuda):
    """CPU threads of one process that trains: one on a CPU, a few feeding a GPU."""
    return 4 if cuda else 1


def calibrate_threads(wildcards):
    """Threads of a calibration: those of one training process on the device.

    The curve it times is then the one a training process sees (one thread on a
    CPU, where parallel jobs use the cores; a few feeding a GPU), and a CPU
    calibration runs beside other jobs (the base's pretraining) as training does.
    """
    return process_threads(DEVICES[wildcards.device].kind == "cuda")


def device_gpu_model(wildcards):
    return _gpu_model(DEVICES[wildcards.device])


TRAIN_PROCESSES = SETTINGS.cluster.processes_per_machine


def train_threads(wildcards):
    """CPU threads of a training job (all its processes together).

    A simulated CPU cluster runs its slots one after another in one process on
    a small model, so parallel runs use cores better than intra-op threads:
    one thread per process. A GPU process gets a few threads to feed its device.
    """
    return process_threads(_uses_cuda()) * TRAIN_PROCESSES


def train_launcher(wildcards):
    """torchrun on the job's machine when the config asks for several training processes."""
    if TRAIN_PROCESSES == 1:
        return ""
    return f"torchrun --standalone --nproc_per_node {TRAIN_PROCESSES} --no-python "


def train_gpu(wildcards):
    """One GPU per training process on a CUDA cluster."""
    return TRAIN_PROCESSES if _uses_cuda() else 0


def cluster_gpu(wildcards):
    return 1 if _uses_cuda() else 0


def cluster_gpu_model(wildcards):
    """The GPU model of the first CUDA device: a training job runs on one kind."""
    models = [_gpu_model(d) for d in DEVICES.values() if d.kind == "cuda"]
    return models[0] if models else None


def calibrate_mem_mb(wildcards):
    """Host memory of a calibration: a simulated CPU device lives in it."""
    device = DEVICES[wildcards.device]
    simulated_mb = round(device.memory_gib * 1024) if device.kind == "cpu" else 0
    return 4000 + simulated_mb


def cpu_budget_mb():
    """Host memory the simulated CPU devices of the config may fill."""
    return sum(
        round(device.count * device.memory_gib * 1024)
        for device in DEVICES.values()
        if device.kind == "cpu"
    )
