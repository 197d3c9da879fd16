"""`adloco train`: one run of the configuration for one seed, or (`--seed all`) each of its seeds.

Reads the tokenized data and the calibration results, trains with
:func:`adloco.engine.compose.build_engine`, and writes ``metrics.jsonl``,
``summary.json`` and ``final/`` (the best trainer's model with the tokenizer
and a model card, :func:`adloco.model.hf_export.save_model_folder`) into the run
folder. Checkpoints go to a separate folder (``--checkpoints``) that
Snakemake does not remove when a job fails, so running the same command again
after a kill resumes from the last complete round; once the outputs are written
the folder is marked finished, and a new job trains the run again. Before any
work it refuses a ``--live`` folder that is, holds or lies in ``--out`` or
``--checkpoints``, a checkpoint folder holding another run's checkpoint, and a
checkpoint folder another ``adloco train`` holds the lock of
(:mod:`adloco.engine.checkpoint_lock`: one trainer per folder). Started by
``torchrun``, it joins the process group and spreads the node slots over the processes
(:mod:`adloco.engine.distributed`); only rank 0 writes the run folder and takes the lock.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import shutil
from pathlib import Path

import torch

from adloco.calibrate.record import (
    check_calibrated_model,
    load_max_batch,
    load_step_time_curve,
)
from adloco.config import ClusterConfig, Config, RunSettings, check_subset_fraction, load_config
from adloco.core import numerics, paths
from adloco.core.io import atomic_dir, check_replaceable, write_json_atomic
from adloco.data.reader import TokenData
from adloco.engine import checkpoint, checkpoint_identity, checkpoint_lock, distributed
from adloco.engine.compose import build_engine
from adloco.engine.driver import Driver
from adloco.engine.records import derive_summary
from adloco.engine.trainers import TrainingDiverged, initial_local_batch
from adloco.model.base import StartModel, start_model
from adloco.model.hf_export import (
    HubMetadata,
    Provenance,
    command_line,
    hub_metadata,
    save_model_folder,
)

log = logging.getLogger(__name__)


def max_batches(cluster: ClusterConfig, calibration_dir: str | Path) -> dict[str, int]:
    """The max batch of every device, from its calibration file (or its configured one)."""
    return {dev.name: load_max_batch(calibration_dir, dev) for dev in cluster.devices}


def step_time_curves(cluster: ClusterConfig, calibration_dir: str | Path) -> dict:
    """The simulated clock's step-time curve of every device, from its calibration file."""
    return {dev.name: load_step_time_curve(calibration_dir, dev) for dev in cluster.devices}


def compute_device(cluster: ClusterConfig):
    if any(d.kind == "cuda" for d in cluster.devices):
        if not torch.cuda.is_available():
            raise ValueError("cluster.devices asks for cuda, but no CUDA device is visible")
        return torch.device("cuda")
    return torch.device("cpu")


def summarize(rows: list[dict], settings: RunSettings, seed: int, final_trainers: int) -> dict:
    """summary.json: the fields the report derives from the rows, and the trainers left."""
    # The rows' active_trainers counts the trainers of the last round before a
    # merge in it; the engine knows how many are left.
    summary = {**derive_summary(rows), "final_trainers": final_trainers}
    return {"run": settings.name, "seed": seed, "method": settings.method, **summary}


# The writer named in the manifest of a run's seed folder and of its final/
# (adloco.core.io.check_replaceable: a folder holding anything else is refused).
WRITER = "adloco train"


def seeds_to_train(config: Config, args: argparse.Namespace) -> list[tuple[int, Path, Path]]:
    """(seed, out folder, checkpoint folder) of each seed the command trains.

    ``--seed all`` trains every seed of the run (its own ``seeds``, else the
    top-level ones) one after the other, each in ``seed<seed>/`` of ``--out``
    and ``--checkpoints``: DVC's stage per run, which a template cannot split
    by the run's own seeds.
    """
    if args.seed != "all":
        return [(int(args.seed), Path(args.out), Path(args.checkpoints))]
    return [
        (seed, Path(args.out) / paths.seed_dir_name(seed),
         Path(args.checkpoints) / paths.seed_dir_name(seed))
        for seed in config.run_seeds(args.run)
    ]  # fmt: skip


def check_live_folder(args: argparse.Namespace) -> None:
    """Refuse a ``--live`` that is, holds or lies in ``--out`` or ``--checkpoints``.

    Checked before any work: live curves written into ``--out`` are files the
    outputs' swap refuses after the last round (every round trained for
    nothing), and inside ``--checkpoints`` they make that folder refused on
    every later resume. With ``--seed all`` the seed folders lie under these
    three, so the command's own paths decide.
    """
    live = getattr(args, "live", None)
    if live is None:
        return
    where = paths.live_dir("<experiment>", "<run>", "<seed>")
    for flag, other in (("--out", args.out), ("--checkpoints", args.checkpoints)):
        mine, theirs = Path(live).resolve(), Path(other).resolve()
        if mine == theirs:
            clash = f"--live {live} is {flag} {other}"
        elif mine.is_relative_to(theirs):
            clash = f"--live {live} is inside {flag} {other}"
        elif theirs.is_relative_to(mine):
            clash = f"{flag} {other} is inside --live {live}"
        else:
            continue
        raise ValueError(
            f"{clash}: live curves are written while the run trains and would mix with "
            f"its outputs or checkpoints; give --live a folder of its own ({where})"
        )


def claim_folders(
    config: Config, args: argparse.Namespace, todo: list, locks: contextlib.ExitStack, writer: bool
) -> None:
    """Check every seed's folders before any training; the writer locks the checkpoint folders.

    ``todo``: :func:`seeds_to_train`'s; ``locks`` holds the locks to the end of
    the command. The folder's identity is checked again under the lock when the
    engine loads it (:meth:`adloco.engine.driver.Driver.load_checkpoint`).
    """
    for seed, out, checkpoints in todo:
        if checkpoints.resolve().is_relative_to(out.resolve()):
            raise ValueError(
                f"--checkpoints {checkpoints} is inside --out {out}: the outputs are replaced as "
                "a whole and would take the checkpoints with them; put them beside it "
                f"({paths.checkpoint_dir('<experiment>', '<run>', '<seed>')})"
            )
        check_replaceable(out, WRITER, "--out")
        checkpoint.check_folder(checkpoints)
        # Before the lock, which would write its holder into another run's folder.
        mine = checkpoint_identity.identity(config.experiment, args.run, seed)
        checkpoint_identity.check(checkpoints, mine)
        if writer:
            locks.enter_context(checkpoint_lock.lock(checkpoints, out))


def run(args: argparse.Namespace) -> int:
    check_live_folder(args)
    config = load_config(args.config)
    settings = config.run(args.run)
    # Every run of a base experiment starts from the verified base model.
    start = start_model(config.model, getattr(args, "base", None), config, args.data)
    torch.use_deterministic_algorithms(True, warn_only=True)
    data = TokenData.open(args.data)
    # Needs the train split's size, known only now: before any training.
    batches = max_batches(config.cluster, args.calibration)
    local_batch = initial_local_batch(settings, batches.values())
    check_subset_fraction(config, settings, len(data.split("train")), local_batch)
    cluster = config.cluster.for_run(settings)
    device = compute_device(cluster)
    collective = None
    launch = distributed.launch_env()
    todo = seeds_to_train(config, args)
    with contextlib.ExitStack() as locks:  # the checkpoint folders' locks, to the end
        claim_folders(config, args, todo, locks, writer=launch is None or launch.rank == 0)
        try:
            if launch is not None:
                distributed.watch_launcher(launch)
                device = distributed.compute_device(launch, device)
                timeout_s = distributed.timeout_s(args.dist_timeout_s)
                collective = distributed.init(cluster, launch, device, timeout_s)
                log.info(
                    "rank %d of %d on %s, slots %s",
                    launch.rank,
                    launch.world_size,
                    device,
                    [s for s in range(len(collective.slot_owner)) if collective.owns(s)],
                )
            hub = hub_metadata(config)  # the final models' card metadata: the same for every seed
            for seed, out, checkpoints in todo:
                engine = make_engine(config, settings, start, seed, data, batches, checkpoints,
                                     args, device=device, collective=collective,
                                     resume_finished=len(todo) > 1)  # fmt: skip
                # Before any step: the calibration was measured on the model just built.
                check_calibrated_model(args.calibration, config.cluster, engine.loop.num_params,
                                       data.seq_len_tokens)  # fmt: skip
                command = seed_command(args, seed, out, checkpoints)
                train_seed(engine, data, out, checkpoints, experiment=config.experiment,
                           command=command, hub=hub)  # fmt: skip
        except distributed.PeerFailure as exc:
            # Leave without tearing the broken process group down: that could wait on the
            # dead peer.
            log.error("%s", exc)
            return 1
    distributed.shutdown()
    return 0


def seed_command(args: argparse.Namespace, seed: int, out: Path, checkpoints: Path) -> str:
    """The ``adloco train`` command line that writes ``out``, this seed's folder, alone."""
    return command_line(
        "train",
        [("--config", args.config), ("--run-name", args.run), ("--seed", seed),
         ("--data", args.data), ("--calibration", args.calibration),
         ("--base", getattr(args, "base", None)), ("--out", out), ("--checkpoints", checkpoints)],
    )  # fmt: skip


def make_engine(
    config: Config,
    settings: RunSettings,
    start: StartModel,
    seed: int,
    data,
    batches: dict[str, int],
    checkpoints: Path,
    args: argparse.Namespace,
    **options,
) -> Driver:
    """The engine of one seed of the run, from the typed sections it needs.

    ``options``: the engine's device, collective and ``resume_finished``.
    """
    return build_engine(
        settings,
        seed,
        data,
        start.model,
        config.cluster.for_run(settings),
        batches,
        step_time_curves(config.cluster, args.calibration),
        checkpoints,
        base_sha256=start.base_sha256,
        lr_keys=(
            config.setting_key(settings.name, "inner_lr"),
            config.setting_key(settings.name, "outer_lr"),
        ),
        progress=not args.no_progress,
        live_dir=seed_live_dir(args, seed),
        experiment=config.experiment,
        **options,
    )


def seed_live_dir(args: argparse.Namespace, seed: int) -> Path | None:
    """The seed's live curves folder: ``--live``, its ``seed<seed>/`` with ``--seed all``."""
    live = getattr(args, "live", None)
    if live is None:
        return None
    return Path(live) / paths.seed_dir_name(seed) if args.seed == "all" else Path(live)


def train_seed(
    engine: Driver,
    data,
    out: Path,
    checkpoints: Path,
    *,
    experiment: str,
    command: str,
    hub: HubMetadata,
) -> None:
    """Train (or resume) one seed and write its outputs; the folder is then marked finished.

    ``experiment``, ``command`` (the command line that writes ``out``) and
    ``hub`` (:func:`adloco.model.hf_export.hub_metadata`) go into the final model's card.
    """
    try:
        rows = engine.run()
    except TrainingDiverged as exc:
        # A diverged run is a result of its settings, not a crash: one line, no traceback.
        raise ValueError(f"{engine.settings.label} diverged: {exc}") from exc
    if engine.comm.is_writer:
        write_outputs(engine, rows, data, out, engine.loop.seed, experiment=experiment,
                      command=command, hub=hub)  # fmt: skip
        # Only now: a job killed before this point resumes; a new job on a
        # finished run (--forcerun, a changed input) trains it again.
        info = {"out": str(out), "round": engine.round, "identity": engine.settings.identity}
        checkpoint.mark_finished(checkpoints, info)


def write_outputs(
    engine,
    rows: list[dict],
    data,
    out: Path,
    seed: int,
    *,
    experiment: str,
    command: str,
    hub: HubMetadata,
) -> None:
    """metrics.jsonl, final/ (best trainer, tokenizer, model card) and summary.json: all or nothing.

    The seed folder is written beside the old one and swapped in at the end,
    so a failure (a full disk while the model is saved) leaves the previous
    outputs whole, or none.
    """
    best = engine.best_trainer()
    model = engine.export_model(best)
    settings = engine.loop.settings
    summary = summarize(rows, settings, seed, len(engine.trainers))
    summary["final_trainer"] = best.id
    # The CPU float paths and threads the run computed with (docs/numerics.md).
    summary["numerics"] = numerics.record()
    last = max(r["round"] for r in rows)
    measured = [
        r["val_perplexity"]
        for r in rows
        if r["round"] == last and r["trainer"] == best.id and r["val_perplexity"] is not None
    ]
    provenance = Provenance(
        experiment=experiment,
        what=f"run {settings.name}, seed {seed}",
        about=f"The run's final model (method {settings.method}): trainer {best.id}, "
        f"the best in validation perplexity of the {len(engine.trainers)} trainer(s) left at "
        "the end. Tokens trained: all trainers' together.",
        tokens=summary["tokens_total"],
        val_perplexity=measured[-1] if measured else None,
        command=command,
        tags=(settings.method,),
        hub=hub,
    )
    with atomic_dir(out, WRITER, "--out") as folder:
        shutil.copyfile(engine.metrics_path, paths.metrics_file(folder))
        with atomic_dir(paths.final_model_dir(folder), WRITER, "--out") as tmp:
            save_model_folder(tmp, model, data.tokenizer_dir, data.seq_len_tokens, provenance)
        write_json_atomic(paths.run_summary_file(folder), summary)
    log.info(
        "%s seed %d: final val perplexity %s",
        settings.name,
        seed,
        summary["final_val_perplexity"],
    )
