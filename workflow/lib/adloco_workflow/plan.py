"""What the Snakemake rules read: the configuration file of the run, checked as
every ``adloco`` command checks it, the names and paths that expand the DAG,
and the functions the rules take as params, threads and resources.

workflow/rules/common.smk builds one :class:`Plan` while Snakemake parses the
workflow and gives its members to the rules by name. A fault ends in
:class:`PlanError`, one line that common.smk raises as Snakemake's
``WorkflowError``. Standard library, jsonschema and PyYAML only (through
:mod:`adloco.config`), so a host with Snakemake alone plans the workflow.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

import adloco.config
import adloco.core.io
from adloco.core import paths
from adloco.stages import snakemake_params
from adloco_workflow import snakemake_preflight


class PlanError(Exception):
    """A configuration the workflow refuses, in one line."""


def config_file(overrides: Mapping, cli_files: Sequence, configfiles: Sequence) -> str:
    """The one YAML file every ``adloco`` command of this run reads.

    ``overrides``: Snakemake's ``--config`` settings (refused); ``cli_files``:
    its ``--configfile`` files; ``configfiles``: every file it read, the
    command line's first and the ``configfile:`` directive's default last.
    """
    if overrides:
        keys = ", ".join(sorted(overrides))
        raise PlanError(
            f"--config {keys}: the configuration file is the single source of every "
            "setting (the adloco commands read the file, not Snakemake's config); "
            "copy config/config.yaml, edit the copy and pass it with --configfile"
        )
    cli_files = list(cli_files)
    if len(cli_files) > 1:
        raise PlanError(
            f"--configfile {' '.join(map(str, cli_files))}: pass exactly one configuration "
            "file; the adloco commands read a single file"
        )
    path = str(cli_files[0]) if cli_files else str(configfiles[-1])
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


def read_config(path: str) -> dict:
    """The file's mapping, read as every adloco command reads it.

    A syntax error names the line, a duplicate key both lines, and the file
    must name its experiment.
    """
    try:
        settings = adloco.config.read_yaml(path)
        adloco.config.check_experiment_named(settings, path)
        return settings
    except adloco.config.ConfigError as exc:
        raise PlanError(str(exc)) from None


def settings(path: str, config: dict) -> adloco.config.Config:
    """The typed configuration the adloco commands read, from the file's mapping ``config``.

    adloco's checks first, so that the messages are those of the adloco
    commands (dotted keys, NaN refused, a hint for 1e-4 written as a string);
    every run is merged with ``train`` and checked, so that a bad override
    fails here, naming the run and the key, rather than in its training job.
    """
    try:
        adloco.config.validate(config)
        return adloco.config.Config.from_dict(config)
    except adloco.config.ConfigError as exc:
        raise PlanError(f"{path}: {exc}") from None


def alternatives(names: Sequence[str]) -> str:
    """A regular expression matching exactly ``names`` (nothing when there are none)."""
    return "|".join(re.escape(name) for name in names) or "(?!)"


def canonical(value: Any) -> Any:
    """``value`` with its mappings in sorted key order.

    Snakemake compares params by their repr, and the same settings written in
    another order are the same settings.
    """
    if isinstance(value, dict):
        return {k: canonical(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [canonical(v) for v in value]
    return value


def input_folder(key: str, up: int = 1):
    """A param function: the folder ``up`` levels above input ``key`` (its first path)."""
    return lambda wildcards, input: _folder_above(input[key], up)


def output_folder(key: str, up: int = 1):
    """A param function: the folder ``up`` levels above output ``key`` (its first path)."""
    return lambda wildcards, output: _folder_above(output[key], up)


def _folder_above(files, up: int) -> str:
    path = files if isinstance(files, str) else files[0]
    for _ in range(up):
        path = os.path.dirname(path)
    return path


class Plan:
    """The values and functions of one run's rules, from its checked configuration.

    ``config`` is the file's mapping (the rules' ``settings`` params are its
    values), ``settings`` its typed form.
    """

    def __init__(self, path: str, config: dict, settings: adloco.config.Config):
        self.CONFIG_FILE = path
        self.config = config
        self.SETTINGS = settings
        # Snakemake empties an output folder before its job runs (--forcerun, a
        # changed setting): the corpus folder, the runs' final models and the
        # report's figures must hold nothing adloco did not write there.
        try:
            snakemake_preflight.check_directory_outputs(settings)
        except adloco.core.io.ForeignFolderError as exc:
            raise PlanError(f"{path}: {exc}") from None
        self._paths(settings)
        self.RUNS = list(settings.runs)
        # Each run's own seeds (runs.<name>.seeds, else the top-level seeds).
        self.RUN_SEEDS = {name: [str(s) for s in settings.run_seeds(name)] for name in self.RUNS}
        self.DEVICES = {device.name: device for device in settings.cluster.devices}
        # Every device is calibrated: a fixed max_batch in the config skips only
        # the max-batch search, not the step timing the simulated clock needs.
        self.CALIBRATED_DEVICES = list(self.DEVICES)
        # Wildcard values: exactly the configured names, so a path never matches
        # a rule by accident (a run name that is a prefix of another, say).
        self.DEVICE_PATTERN = alternatives(self.CALIBRATED_DEVICES)
        self.RUN_PATTERN = alternatives(self.RUNS)
        self.TRAIN_PROCESSES = settings.cluster.processes_per_machine
        # seed: one training job per run and seed; run: one per run (snakemake.train_jobs).
        self.TRAIN_JOBS = settings.snakemake.train_jobs
        self.STAGE_PARAMS = snakemake_params()

    def _paths(self, settings: adloco.config.Config) -> None:
        self.DATASET = settings.data.dataset
        self.RAW_DIR = settings.data.raw_dir.rstrip("/")
        self.TOKENIZED_DIR = str(paths.tokenized_dir(self.DATASET))
        self.MANIFEST = str(paths.manifest_file(self.TOKENIZED_DIR))
        # Everything this configuration computes: results/<experiment>/, logs/<experiment>/.
        self.EXPERIMENT = settings.experiment
        self.CALIBRATION_DIR = str(paths.calibration_dir(self.EXPERIMENT))
        self.VARIANCE_DIR = str(paths.variance_dir(self.EXPERIMENT))
        self.REPORT_DIR = str(paths.report_dir(self.EXPERIMENT))
        self.BASE_DIR = str(paths.base_dir(self.EXPERIMENT))
        # Every run of a `model.source: base` experiment starts from the base model.
        self.USES_BASE = settings.model.source == "base"
        self.LOG_DIR = str(paths.logs_dir(self.EXPERIMENT))
        self.DATA_LOG_DIR = str(paths.data_logs_dir(self.DATASET))

    def config_file(self, wildcards, input) -> str:
        """A param function: the configuration file every job's command reads.

        It takes ``input`` (unused) on purpose: Snakemake leaves params derived
        from a job's input out of its params rerun trigger, and the file's *name*
        must not re-run anything (a copy under another name, same settings, is the
        same work). What the file says is tracked: the ``settings`` param.
        """
        return self.CONFIG_FILE

    def stage_params(self, stage: str, wildcards=None) -> dict:
        """The configuration values ``stage`` depends on, keyed by dotted key."""
        values = {}
        for template in self.STAGE_PARAMS[stage]:
            key = template.format(**dict(wildcards.items())) if wildcards else template
            # Two levels at most; a run name may itself contain dots.
            section, _, field = key.partition(".")
            config = self.config
            values[key] = canonical(config[section][field] if field else config[section])
        return values

    def calibration_files(self) -> list[str]:
        return [
            str(paths.calibration_file(self.EXPERIMENT, device))
            for device in self.CALIBRATED_DEVICES
        ]

    def run_file(self, name: str, run: str = "{run}", seed: str = "{seed}") -> str:
        """A file of a run folder, results/<experiment>/runs/<run>/seed<seed>/<name>."""
        return str(paths.run_dir(self.EXPERIMENT, run, seed) / name)

    def run_files(self, name: str, run: str) -> list[str]:
        """A file of each of ``run``'s seed folders: a job of the whole run writes them all."""
        return [self.run_file(name, run, seed) for seed in self.RUN_SEEDS[run]]

    def run_folders(self, run: str) -> dict[str, str]:
        """``--checkpoints`` and ``--live`` of ``adloco train --seed all`` on ``run``.

        The command puts each seed in ``seed<seed>/`` of each, the folder a job
        per seed is given; neither is an output (its ``--out`` is the seed
        folders' parent).
        """
        return {
            "checkpoints": str(paths.run_checkpoints_dir(self.EXPERIMENT, run)),
            "live": str(paths.run_live_dir(self.EXPERIMENT, run)),
        }

    def run_summaries(self) -> list[str]:
        runs = self.RUN_SEEDS
        return [self.run_file("summary.json", r, s) for r in self.RUNS for s in runs[r]]

    def run_metrics(self) -> list[str]:
        runs = self.RUN_SEEDS
        return [self.run_file("metrics.jsonl", r, s) for r in self.RUNS for s in runs[r]]

    def base_input(self) -> list[str]:
        """The base model's summary, as an input of the jobs that start from it."""
        return [f"{self.BASE_DIR}/base.json"] if self.USES_BASE else []

    def base_arg(self) -> list[str]:
        """`--base <folder>` for the jobs that start from the base model (a list for :q)."""
        return ["--base", self.BASE_DIR] if self.USES_BASE else []

    def device_record_input(self, wildcards) -> list[str]:
        """The measured record a device's clock is mapped from (step_time.record), if any."""
        step_time = self.SETTINGS.cluster.device(wildcards.device).step_time
        return [step_time.record] if step_time.model == "measured_record" else []

    def report_tuning_input(self) -> list[str]:
        """The tuning record report.tuning names (config/tuning.json), when it names one."""
        tuning = self.SETTINGS.report.tuning
        return [tuning] if tuning else []

    def report_tuning_output(self) -> list[str]:
        """tuning.json, written by a tuning experiment's report (report.tuning_groups)."""
        groups = self.SETTINGS.report.tuning_groups
        return [f"{self.REPORT_DIR}/tuning.json"] if groups else []

    def tokenize_raw_arg(self) -> list[str]:
        """`--raw <folder>`: the hub source streams records, the others read C4-format files.

        A list, so that `{params.raw:q}` quotes the folder alone.
        """
        return [] if self.SETTINGS.data.source == "hub" else ["--raw", self.RAW_DIR]

    def tokenize_raw_input(self) -> list[str]:
        return [] if self.SETTINGS.data.source == "hub" else [self.RAW_DIR]
