"""`adloco train`'s library: one run of the configuration for one seed, or each of its seeds.

The stage's library over the engine, as :mod:`adloco.calibrate` and
:mod:`adloco.variance` are theirs. :func:`train` takes the command line as a
:class:`TrainRequest` (:mod:`adloco.stages.train`'s arguments), reads the
tokenized data and the calibration results, resolves each seed's
:class:`adloco.engine.spec.EngineSpec`, trains with
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

import contextlib
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch

from adloco.config import ClusterConfig, Config, RunSettings, check_subset_fraction, load_config
from adloco.core import numerics, paths
from adloco.core.io import atomic_dir, check_replaceable, write_json_atomic
from adloco.data.reader import TokenData
from adloco.engine import checkpoint, checkpoint_identity, checkpoint_lock, distributed
from adloco.engine.collective import LocalCollective
from adloco.engine.compose import build_engine
from adloco.engine.driver import Driver
from adloco.engine.spec import EngineSpec
from adloco.engine.trainers import TrainingDiverged, initial_local_batch
from adloco.formats.calibration import (
    check_calibrated_model,
    load_max_batch,
    load_step_time_curve,
)
from adloco.formats.metrics import derive_summary
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


@dataclass(frozen=True, kw_only=True)
class TrainRequest:
    """What ``adloco train`` is asked: its command line, typed (:mod:`adloco.stages.train`).

    One field per argument of the stage, with its default
    (:func:`adloco.stages.declaration.request_problems` checks). The paths are
    kept as given: the final model's card quotes the command line that wrote
    it (:func:`seed_command`).
    """

    config: str | Path  # the configuration YAML
    run: str  # the run's name in `runs`
    # A training seed, or "all": each of the run's seeds, in seed<seed>/ of
    # out, checkpoints and live (DVC's stage per run).
    seed: int | Literal["all"]
    data: str | Path  # the tokenized data folder
    calibration: str | Path  # the folder of the devices' calibration records
    out: str | Path  # the run folder
    checkpoints: str | Path  # the checkpoint folder, kept when a job fails
    base: str | Path | None = None  # the base model folder (model.source: base)
    live: str | Path | None = None  # the folder of live curves (None: none)
    progress: bool = True  # a bar on a terminal (else one log line per round)
    # Under torchrun: seconds a collective may wait for the other processes
    # (None: $ADLOCO_DIST_TIMEOUT_S, else distributed's default).
    dist_timeout_s: float | None = None


def seeds_to_train(config: Config, request: TrainRequest) -> list[tuple[int, Path, Path]]:
    """(seed, out folder, checkpoint folder) of each seed the command trains.

    ``--seed all`` trains every seed of the run (its own ``seeds``, else the
    top-level ones) one after the other, each in ``seed<seed>/`` of ``--out``
    and ``--checkpoints``: DVC's stage per run, which a template cannot split
    by the run's own seeds.
    """
    out, checkpoints = Path(request.out), Path(request.checkpoints)
    if request.seed != "all":
        return [(int(request.seed), out, checkpoints)]
    return [
        (seed, out / paths.seed_dir_name(seed), checkpoints / paths.seed_dir_name(seed))
        for seed in config.run_seeds(request.run)
    ]


def check_live_folder(request: TrainRequest) -> None:
    """Refuse a ``--live`` that is, holds or lies in ``--out`` or ``--checkpoints``.

    Checked before any work: live curves written into ``--out`` are files the
    outputs' swap refuses after the last round (every round trained for
    nothing), and inside ``--checkpoints`` they make that folder refused on
    every later resume. With ``--seed all`` the seed folders lie under these
    three, so the command's own paths decide.
    """
    live = request.live
    if live is None:
        return
    where = paths.live_dir("<experiment>", "<run>", "<seed>")
    for flag, other in (("--out", request.out), ("--checkpoints", request.checkpoints)):
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
    config: Config, run: str, todo: list, locks: contextlib.ExitStack, writer: bool
) -> None:
    """Check every seed's folders before any training; the writer locks the checkpoint folders.

    ``todo``: :func:`seeds_to_train`'s for the run named ``run``; ``locks``
    holds the locks to the end of the command. The folder's identity is
    checked again under the lock when the engine loads it
    (:meth:`adloco.engine.driver.Driver.load_checkpoint`).
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
        mine = checkpoint_identity.identity(config.experiment, run, seed)
        checkpoint_identity.check(checkpoints, mine)
        if writer:
            locks.enter_context(checkpoint_lock.lock(checkpoints, out))


def train(request: TrainRequest) -> int:
    """Train every seed of the request; 0, or 1 when a peer process failed under torchrun."""
    check_live_folder(request)
    log.info(
        "%s: load: the configuration %s, the %s, the tokenized data %s and the calibration %s",
        request.run,
        request.config,
        f"base model {request.base}"
        if request.base is not None
        else "start model (its model.source)",
        request.data,
        request.calibration,
    )
    config = load_config(request.config)
    settings = config.run(request.run)
    # Every run of a base experiment starts from the verified base model.
    start = start_model(config.model, request.base, config, request.data)
    torch.use_deterministic_algorithms(True, warn_only=True)
    data = TokenData.open(request.data)
    # Needs the train split's size, known only now: before any training.
    batches = max_batches(config.cluster, request.calibration)
    local_batch = initial_local_batch(settings, batches.values())
    check_subset_fraction(config, settings, len(data.split("train")), local_batch)
    cluster = config.cluster.for_run(settings)
    device = compute_device(cluster)
    collective = LocalCollective()
    launch = distributed.launch_env()
    todo = seeds_to_train(config, request)
    with contextlib.ExitStack() as locks:  # the checkpoint folders' locks, to the end
        claim_folders(config, request.run, todo, locks, writer=launch is None or launch.rank == 0)
        try:
            if launch is not None:
                distributed.watch_launcher(launch)
                device = distributed.compute_device(launch, device)
                timeout_s = distributed.timeout_s(request.dist_timeout_s)
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
                log.info("%s seed %d: load: building the model and its trainers", request.run, seed)
                spec = engine_spec(config, start, data, batches, request, seed, checkpoints,
                                   device=device, collective=collective,
                                   resume_finished=len(todo) > 1)  # fmt: skip
                engine = build_engine(spec)
                # Before any step: the calibration was measured on the model just built.
                check_calibrated_model(request.calibration, config.cluster, engine.loop.num_params,
                                       data.seq_len_tokens)  # fmt: skip
                command = seed_command(request, seed, out, checkpoints)
                train_seed(engine, data, out, checkpoints, experiment=config.experiment,
                           command=command, hub=hub)  # fmt: skip
        except distributed.PeerFailure as exc:
            # Leave without tearing the broken process group down: that could wait on the
            # dead peer.
            log.error("%s", exc)
            return 1
    distributed.shutdown()
    log.info("%s: done: %d seed(s) written", request.run, len(todo))
    return 0


def seed_command(request: TrainRequest, seed: int, out: Path, checkpoints: Path) -> str:
    """The ``adloco train`` command line that writes ``out``, this seed's folder, alone."""
    return command_line(
        "train",
        [("--config", request.config), ("--run-name", request.run), ("--seed", seed),
         ("--data", request.data), ("--calibration", request.calibration),
         ("--base", request.base), ("--out", out), ("--checkpoints", checkpoints)],
    )  # fmt: skip


def engine_spec(
    config: Config,
    start: StartModel,
    data,
    batches: dict[str, int],
    request: TrainRequest,
    seed: int,
    checkpoints: Path,
    *,
    device: torch.device,
    collective,
    resume_finished: bool,
) -> EngineSpec:
    """What the engine of one seed of the request's run is built from.

    From the typed sections it needs: the run's settings and cluster, the
    resolved model with the base's checksums, the devices' max batches
    (``batches``) and curves, where the run's lr settings are written.
    ``resume_finished``: with several seeds in one job, the finished
    checkpoints of the seeds a killed job had done are resumed, not trained again.
    """
    settings = config.run(request.run)
    return EngineSpec(
        settings=settings,
        seed=seed,
        data=data,
        model=start.model,
        cluster=config.cluster.for_run(settings),
        max_batches=batches,
        curves=step_time_curves(config.cluster, request.calibration),
        checkpoint_dir=checkpoints,
        base_sha256=start.base_sha256,
        lr_keys=(
            config.setting_key(settings.name, "inner_lr"),
            config.setting_key(settings.name, "outer_lr"),
        ),
        experiment=config.experiment,
        live_dir=seed_live_dir(request, seed),
        progress=request.progress,
        resume_finished=resume_finished,
        device=device,
        collective=collective,
    )


def seed_live_dir(request: TrainRequest, seed: int) -> Path | None:
    """The seed's live curves folder: ``--live``, its ``seed<seed>/`` with ``--seed all``."""
    if request.live is None:
        return None
    live = Path(request.live)
    return live / paths.seed_dir_name(seed) if request.seed == "all" else live


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
        log.info("%s: checkpoint: marking %s finished", engine.settings.label, checkpoints)
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
    settings = engine.loop.settings
    label = f"{settings.name} seed {seed}"
    log.info("%s: evaluate: choosing the final model by the last round's validation", label)
    best = engine.best_trainer()
    log.info(
        "%s: export: trainer %s's model, the tokenizer and a model card to %s, then %s and %s",
        label,
        best.id,
        paths.final_model_dir(out),
        paths.metrics_file(out).name,
        paths.run_summary_file(out).name,
    )
    model = engine.export_model(best)
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
            # A final model: no stage trains it further, so config.json names its pad token.
            save_model_folder(
                tmp, model, data.tokenizer_dir, data.seq_len_tokens, provenance, pad_in_config=True
            )
        write_json_atomic(paths.run_summary_file(folder), summary)
    log.info(
        "%s seed %d: final val perplexity %s",
        settings.name,
        seed,
        summary["final_val_perplexity"],
    )
