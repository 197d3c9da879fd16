"""One run for one seed put together: a round loop and the driver that runs it.

:func:`build_engine` builds the round loop
(:class:`adloco.engine.loop.RoundLoop`, what a round does, from the training
settings) and the driver (:class:`adloco.engine.driver.Driver`, checkpoints,
resume, progress and export, from its own few settings), sharing the run's
state, collective and wall clock; ``engine.run()`` trains, resuming from the
last checkpoint.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch

from adloco.config import ClusterConfig, ModelConfig, RunSettings
from adloco.engine import checkpoint_identity, clock
from adloco.engine.collective import LocalCollective
from adloco.engine.driver import Driver, DriverSettings, run_fingerprint
from adloco.engine.loop import RoundLoop
from adloco.engine.state import WallClock


def build_engine(
    settings: RunSettings,
    seed: int,
    data,
    model: ModelConfig,
    cluster: ClusterConfig,
    max_batches: Mapping[str, int],
    curves: Mapping[str, clock.StepTimeCurve],
    checkpoint_dir: str | Path,
    *,
    base_sha256: Mapping[str, str] | None = None,
    lr_keys: tuple[str, str] = ("inner_lr", "outer_lr"),
    device: torch.device | None = None,
    progress: bool = True,
    collective=None,
    resume_finished: bool = False,
    live_dir: str | Path | None = None,
    experiment: str | None = None,
) -> Driver:
    """The driver of the run's round loop; ``run()`` resumes from the last checkpoint.

    ``model``: a base model resolved (:func:`adloco.model.base.start_model`, its
    ``base_sha256`` in the fingerprint); ``lr_keys``: where the run's inner and
    outer lr are written, for the message of a diverged round; ``live_dir``:
    where the run's live curves go (:mod:`adloco.engine.live_curves`); ``experiment``:
    the configuration's, which with the run's name and the seed says whose
    checkpoints the folder holds (:func:`adloco.engine.checkpoint_identity.identity`).
    """
    comm = collective or LocalCollective()
    wall_clock = WallClock()
    loop = RoundLoop(
        settings, seed, data, model, cluster, max_batches, curves,
        lr_keys=lr_keys, device=device, collective=comm, wall_clock=wall_clock,
    )  # fmt: skip
    fingerprint = run_fingerprint(
        settings, seed, model, base_sha256, cluster, max_batches, dict(curves), data
    )
    driver_settings = DriverSettings(
        checkpoint_dir=Path(checkpoint_dir),
        fingerprint=fingerprint,
        checkpoint_every_rounds=settings.checkpoint_every_rounds,
        label=f"{settings.name} seed {seed}",
        max_tokens=settings.max_tokens,
        progress=progress,
        resume_finished=resume_finished,
        live_dir=None if live_dir is None else Path(live_dir),
        identity=checkpoint_identity.identity(experiment, settings.name, seed),
    )
    return Driver(loop, comm, driver_settings, wall_clock)
