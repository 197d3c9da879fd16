# Wiring of the rules (rules/*.smk): the configuration file the jobs read,
# checked before any job starts, and the names the rules read. What they mean
# lives in lib/adloco_workflow (plan.py: paths, runs, devices, the params
# functions; resources.py: threads, memory, GPUs) and in the stages'
# declarations (adloco.stages: the configuration keys of each stage), which
# import only the checkout's adloco.config, .stages, .paths and .io: a host
# with Snakemake alone parses, validates and plans the workflow, and the jobs
# run `adloco` from the rules' environment (workflow/envs/adloco.yaml).

import os
import sys

from snakemake.exceptions import WorkflowError
from snakemake.logging import logger
from snakemake.utils import validate

# Imported under their package's name: Snakemake's own names (Resources, ...)
# share this namespace.
import adloco_workflow.plan
import adloco_workflow.resources
import adloco_workflow.snakemake_lock
import adloco_workflow.snakemake_preflight
from adloco.core import paths

# `.venv/bin/snakemake` run without the virtual environment on PATH: the jobs
# still run the `adloco` installed beside it (with --use-conda, the rule's
# environment, activated in each job's shell, comes first).
adloco_workflow.snakemake_preflight.put_adloco_on_path()

# A Snakemake killed mid-run leaves its lock (.snakemake/locks) behind. Parsing
# comes before Snakemake checks the lock, so release it here when no other
# Snakemake or adloco process can hold it (lib/adloco_workflow/snakemake_lock.py):
# re-running the same command then resumes. Only in the main process: the
# Snakemake processes that run cluster jobs must not touch the lock.
if workflow.is_main_process:
    adloco_workflow.snakemake_lock.on_parse(
        os.getcwd(), unlock="--unlock" in sys.argv, log=logger.warning
    )

try:
    # A --configfile comes first in workflow.configfiles and the `configfile:`
    # directive's default is appended after it, so the command line wins.
    CONFIG_FILE = adloco_workflow.plan.config_file(
        workflow.config_settings.config, workflow.overwrite_configfiles, workflow.configfiles
    )
    # Snakemake deep-merges a --configfile into config/config.yaml; the jobs read
    # the file alone, so the DAG is built from the file alone too (otherwise
    # runs of the default file would leak into a --configfile with fewer runs).
    config.clear()
    config.update(adloco_workflow.plan.read_config(CONFIG_FILE))
    # Snakemake's banner says config/config.yaml "is extended by" a --configfile; the jobs
    # read one file alone. Say which, once, in the main process.
    if workflow.is_main_process:
        logger.info(
            f"adloco: configuration {CONFIG_FILE} alone: every job reads this file, "
            "not a merge with config/config.yaml (a --configfile replaces it)"
        )
    SETTINGS = adloco_workflow.plan.settings(CONFIG_FILE, config)
except adloco_workflow.plan.PlanError as exc:
    raise WorkflowError(str(exc)) from None
validate(config, "../schemas/config.schema.yaml")
try:
    PLAN = adloco_workflow.plan.Plan(CONFIG_FILE, config, SETTINGS)
except adloco_workflow.plan.PlanError as exc:
    raise WorkflowError(str(exc)) from None
RESOURCES = adloco_workflow.resources.Resources(SETTINGS.cluster)

# The names the rules read.
DATASET = PLAN.DATASET
RAW_DIR = PLAN.RAW_DIR
TOKENIZED_DIR = PLAN.TOKENIZED_DIR
MANIFEST = PLAN.MANIFEST
EXPERIMENT = PLAN.EXPERIMENT
CALIBRATION_DIR = PLAN.CALIBRATION_DIR
VARIANCE_DIR = PLAN.VARIANCE_DIR
REPORT_DIR = PLAN.REPORT_DIR
BASE_DIR = PLAN.BASE_DIR
USES_BASE = PLAN.USES_BASE
LOG_DIR = PLAN.LOG_DIR
DATA_LOG_DIR = PLAN.DATA_LOG_DIR
RUNS = PLAN.RUNS
RUN_SEEDS = PLAN.RUN_SEEDS
DEVICES = PLAN.DEVICES
CALIBRATED_DEVICES = PLAN.CALIBRATED_DEVICES
DEVICE_PATTERN = PLAN.DEVICE_PATTERN
RUN_PATTERN = PLAN.RUN_PATTERN
TRAIN_PROCESSES = PLAN.TRAIN_PROCESSES
TRAIN_JOBS = PLAN.TRAIN_JOBS
STAGE_PARAMS = PLAN.STAGE_PARAMS

input_folder = adloco_workflow.plan.input_folder
output_folder = adloco_workflow.plan.output_folder
config_file = PLAN.config_file
stage_params = PLAN.stage_params
calibration_files = PLAN.calibration_files
run_file = PLAN.run_file
run_files = PLAN.run_files
run_folders = PLAN.run_folders
run_summaries = PLAN.run_summaries
run_metrics = PLAN.run_metrics
base_input = PLAN.base_input
base_arg = PLAN.base_arg
report_tuning_input = PLAN.report_tuning_input
device_record_input = PLAN.device_record_input
report_tuning_output = PLAN.report_tuning_output
tokenize_raw_arg = PLAN.tokenize_raw_arg
tokenize_raw_input = PLAN.tokenize_raw_input

device_gpu = RESOURCES.device_gpu
device_gpu_model = RESOURCES.device_gpu_model
calibrate_threads = RESOURCES.calibrate_threads
calibrate_mem_mb = RESOURCES.calibrate_mem_mb
train_threads = RESOURCES.train_threads
train_launcher = RESOURCES.train_launcher
train_gpu = RESOURCES.train_gpu
cluster_gpu = RESOURCES.cluster_gpu
cluster_gpu_model = RESOURCES.cluster_gpu_model
cpu_budget_mb = RESOURCES.cpu_budget_mb
