"""What the schema cannot say: rules between fields, checked on the typed configuration.

Each check raises :class:`ConfigError` naming the key to change and why, at
load, so that a mistake fails before any job starts rather than after hours.
"""

from __future__ import annotations

import math
import os

from adloco.config.runs import RunSettings
from adloco.config.schema import ConfigError
from adloco.config.types import Config
from adloco.core import paths
from adloco.formats import model_size

# The report's settings that name runs.
REPORT_ROLES = ("adloco", "diloco", "ddp", "baselines", "ablations")


# The largest seed: torch's and numpy's generators take it, and the data order's
# seed (seed x 1_000_003 + epoch, adloco.engine.sampler) stays within torch's 64 bits.
MAX_SEED = 2**32 - 1
# The longest name that becomes a file or folder name (results/<experiment>/,
# a run's folder, a device's calibration file, data/tokenized/<dataset>), with room
# for adloco's temporaries beside it (.<name>.<8 characters>.tmp) under the 255 bytes
# of a file name.
MAX_NAME = 100


def seed_problem(value: int) -> str | None:
    """Why ``value`` is no seed adloco takes, or None."""
    if value < 0 or value > MAX_SEED:
        return f"{value} is not a seed from 0 to {MAX_SEED} (2**32 - 1); choose one in that range"
    return None


def check_config(config: Config) -> None:
    """Every rule below, in the order a reader fixes them."""
    check_names_and_seeds(config)
    check_devices(config)
    check_runs(config)
    check_sources(config)
    check_report_roles(config)
    check_model_fits(config)


def check_names_and_seeds(config: Config) -> None:
    """Names that become file names fit one; seeds fit the generators (named by key)."""
    names = [("experiment", config.experiment), ("data.dataset", config.data.dataset)]
    names += [(f"cluster.devices.{i}.name", d.name) for i, d in enumerate(config.cluster.devices)]
    names += [(f"runs.{name}", name) for name in config.runs]
    for key, name in names:
        if len(name.encode()) > MAX_NAME:
            raise ConfigError(
                f"{key}: a name of {len(name.encode())} bytes ({name[:20]}...); it names a file "
                f"or folder, so at most {MAX_NAME}: choose a shorter name"
            )
    seeds = [("seed", config.seed)]
    seeds += [(f"seeds.{i}", seed) for i, seed in enumerate(config.seeds)]
    for name, entry in config.runs.items():
        if tuple(entry.seeds) != tuple(config.seeds):  # the run's own seeds
            seeds += [(f"runs.{name}.seeds.{i}", s) for i, s in enumerate(entry.seeds)]
    for key, seed in seeds:
        problem = seed_problem(seed)
        if problem is not None:
            raise ConfigError(f"{key}: {problem}")


def check_devices(config: Config) -> None:
    cluster = config.cluster
    seen: dict[str, int] = {}
    for index, device in enumerate(cluster.devices):
        if device.name in seen:
            raise ConfigError(
                f"cluster.devices.{index}.name: {device.name!r} is also the name of "
                f"cluster.devices.{seen[device.name]}; each device needs its own name (its "
                f"calibration file is {paths.calibration_file(config.experiment, '<name>')})"
            )
        seen[device.name] = index
        device.check_step_time(f"cluster.devices.{index}")
    if cluster.processes_per_machine > cluster.device_count():
        raise ConfigError(
            f"cluster.processes_per_machine: {cluster.processes_per_machine} processes for "
            f"{cluster.device_count()} devices; every process needs at least one device"
        )


def check_runs(config: Config) -> None:
    for name, entry in config.runs.items():
        run = entry.settings
        check_own_slots(config, run)
        slots = config.cluster.for_run(run).slots()
        if run.initial_trainers > slots:
            raise ConfigError(
                f"runs.{name}.initial_trainers: {run.initial_trainers} trainers need at least "
                f"as many node slots, the cluster has {slots}"
            )
        # A run that starts with one trainer has nothing to merge whatever its merge
        # settings (the multi-instance ablation changes initial_trainers alone); from two
        # trainers on, a merge_count above the trainers left merges them all.
        check_statistics(config, run)


def check_own_slots(config: Config, run: RunSettings) -> None:
    """A run with its own nodes_per_device keeps its batch (the max batch is a cluster slot's)."""
    if run.nodes_per_device is None:
        return
    varying = {
        "batch_test": run.batch_test != "none",
        "merge": run.merge != "none",
        "initial_batch": run.initial_batch == "max_batch",
    }
    for key, bad in varying.items():
        if bad:
            raise ConfigError(
                f"{config.setting_key(run.name, 'nodes_per_device')}: run {run.name} sets its own "
                f"node slots per device, so its batch must stay as configured (the calibrated max "
                f"batch is that of a slot of the cluster's {config.cluster.nodes_per_device}), "
                f"but {key} is {getattr(run, key)!r}; use batch_test none, merge none and a "
                "numeric initial_batch, or leave nodes_per_device null"
            )


def check_statistics(config: Config, run: RunSettings) -> None:
    """A batch test needs blocks of two groups or more, and vector mode one point per round."""
    if run.batch_test == "none":
        return
    name = run.name
    if run.stats_steps == 1 and run.stats_microbatches == 1:
        raise ConfigError(
            f"{config.setting_key(name, 'stats_microbatches')}: run {name} has one group per "
            "statistics block (stats_steps 1, stats_microbatches 1), so its batch test has no "
            "variance to read; raise stats_microbatches or stats_steps"
        )
    if run.stats_reduce == "vector" and (run.stats_steps != 1 or run.stats_blocks != "first"):
        raise ConfigError(
            f"{config.setting_key(name, 'stats_reduce')}: vector pools the groups of every node "
            "at the trainer's common point, the round's first step: it needs stats_steps 1 and "
            "stats_blocks first"
        )


def check_sources(config: Config) -> None:
    """Where the tokenizer, the model and the data come from, and what each source needs."""
    data, model = config.data, config.model
    if data.tokenizer.kind == "pretrained" and not data.tokenizer.name:
        raise ConfigError("data.tokenizer.name: required when data.tokenizer.kind is pretrained")
    if model.source == "pretrained" and not model.name:
        raise ConfigError("model.name: required when model.source is pretrained")
    if model.source == "base":
        if config.pretrain is None:
            raise ConfigError("pretrain: required when model.source is base (the base's loop)")
        if not data.base_fraction > 0:
            raise ConfigError(
                "data.base_fraction: must be above 0 when model.source is base, so that the "
                "base model pretrains on documents the runs never train on"
            )
    if data.source == "hub" and data.max_documents is None:
        raise ConfigError(
            "data.max_documents: required when data.source is hub (C4 is 365M documents)"
        )
    if model.hidden_size % model.num_attention_heads:
        raise ConfigError("model.hidden_size: must be a multiple of model.num_attention_heads")
    if model.num_attention_heads % model.num_key_value_heads:
        raise ConfigError("model.num_key_value_heads: must divide model.num_attention_heads")


def check_report_roles(config: Config) -> None:
    """Every run the ``report`` section names is a run of this configuration.

    Checked at load, so that a typo fails before any training rather than in
    the report job after all of it.
    """
    report = config.report
    named = {f"report.{role}": getattr(report, role) for role in REPORT_ROLES}
    named["report.targets.derived_runs"] = report.targets.derived_runs
    for key, value in named.items():
        names = [value] if isinstance(value, str) else list(value or [])
        for name in names:
            if name not in config.runs:
                raise ConfigError(
                    f"{key}: no run named {name} (runs: {', '.join(config.runs)}); name one "
                    "of them, or null to let the report detect it"
                )


def check_model_fits(config: Config) -> None:
    """Refuse a model whose training state alone exceeds one node slot's memory share.

    What calibration would find only after building the model (or the
    allocator, with a traceback): weights, gradients and AdamW's two moments
    (:func:`adloco.formats.model_size.training_state_bytes`) must fit the share
    ``memory_gib / nodes_per_device`` of every device. A pretrained model's size
    is known only once it is loaded, so it is not checked here.
    """
    model = config.model
    if model.source == "pretrained":
        return
    tokenizer = config.data.tokenizer
    # Only a BPE's vocabulary is known before tokenization; 0 keeps the estimate a lower bound.
    vocab = tokenizer.vocab_size if tokenizer.kind == "bpe" else 0
    params = model_size.parameter_count(model, vocab)
    need = model_size.training_state_bytes(params, model.dtype)
    # The most slots any run puts on a device: its share is the smallest.
    per_device = max(
        [config.cluster.nodes_per_device]
        + [config.cluster.for_run(e.settings).nodes_per_device for e in config.runs.values()]
    )
    for index, device in enumerate(config.cluster.devices):
        share = device.memory_gib * model_size.GIB / per_device
        if need > share:
            raise ConfigError(
                f"model: {params:,} parameters (hidden_size {model.hidden_size}, "
                f"{model.num_hidden_layers} layers) need {need / model_size.GIB:.3g} GiB for "
                f"weights, gradients and AdamW's moments at {model.dtype}, more than a node "
                f"slot of cluster.devices.{index} ({device.name}) has: "
                f"{device.memory_gib:g} GiB / {per_device} slots = "
                f"{share / model_size.GIB:.3g} GiB; make the model smaller (model.hidden_size, "
                "model.num_hidden_layers) or give the device more memory_gib"
            )


def check_subset_fraction(
    config: Config, run: RunSettings, train_sequences: int, initial_local_batch: int
) -> None:
    """Refuse a subset_fraction that leaves a trainer fewer sequences than its first batch.

    It needs the train split's size, known only once the data is tokenized, so
    ``adloco train`` checks it when it opens the data (not the schema).
    ``run`` is the resolved run; ``initial_local_batch`` its local batch per
    node slot at the start. A trainer starts on an equal share of the node
    slots (the larger share when they do not divide evenly), its global batch
    that many times the local batch, and draws from a subset of
    ``max(1, round(train_sequences * subset_fraction))`` sequences.
    """
    name = run.name
    fraction = run.subset_fraction
    subset = max(1, round(train_sequences * fraction))
    slots = config.cluster.for_run(run).slots()
    share = math.ceil(slots / run.initial_trainers)
    batch = initial_local_batch * share
    if subset >= batch:
        return
    problem = (
        f"{config.setting_key(name, 'subset_fraction')}: {fraction} of the "
        f"{train_sequences} train sequences leaves {subset} sequences per trainer, fewer "
        f"than run {name}'s first batch of {batch} ({initial_local_batch} per node slot x "
        f"{share} slots)"
    )
    if batch <= train_sequences:
        need = _round_up(batch / train_sequences)
        raise ConfigError(f"{problem}; raise it to at least {need:g} or lower the batch")
    # No fraction can help: even the whole split is smaller than the batch.
    raise ConfigError(
        f"{problem}; even the whole train split is smaller than that batch: lower "
        f"{config.setting_key(name, 'initial_batch')} to at most {train_sequences // share} "
        "sequences per node slot, or tokenize more documents (data.max_documents)"
    )


def _round_up(value: float, digits: int = 3) -> float:
    """``value`` rounded up to ``digits`` significant digits (a bound a user can write)."""
    step = 10.0 ** (math.floor(math.log10(value)) - digits + 1)
    return min(1.0, round(math.ceil(value / step - 1e-9) * step, 12))


def check_dvc_raw_dir(config: Config, dvc_root: str) -> None:
    """Refuse a ``data.raw_dir`` that ``dvc repro`` cannot keep (the repository at ``dvc_root``).

    dvc.yaml's prepare-corpus stage declares the folder as its output, and DVC 3
    keeps (caches) outputs only inside the repository, written relative to it:
    an absolute path, even one inside, or a path out of it ends in DVC's
    "failed to reproduce 'prepare-corpus'" with no reason. Run by DVC, the
    stage's command checks it first (:func:`adloco.data.corpus.prepare_corpus`).
    """
    raw_dir = config.data.raw_dir
    root = os.path.normpath(dvc_root)
    if os.path.isabs(raw_dir):
        where = "an absolute path"
    elif not os.path.normpath(os.path.join(root, raw_dir)).startswith(root + os.sep):
        where = "outside the repository"
    else:
        return
    raise ConfigError(
        f"data.raw_dir: {raw_dir} is {where}; dvc.yaml's prepare-corpus stage writes it, and "
        "DVC keeps a stage's outputs only inside the repository, written relative to it: set "
        f"data.raw_dir to a folder such as data/raw/{config.data.dataset}, or run the pipeline "
        "with Snakemake, which takes any folder"
    )
