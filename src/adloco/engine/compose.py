"""One run for one seed put together: a round loop and the driver that runs it.

:func:`build_engine` builds, from one :class:`adloco.engine.spec.EngineSpec`,
the round loop (:class:`adloco.engine.loop.RoundLoop`, what a round does) and
the driver (:class:`adloco.engine.driver.Driver`, checkpoints, resume, progress
and export, from its own few settings: :func:`driver_settings`), sharing the
run's state, collective and wall clock; ``engine.run()`` trains, resuming from
the last checkpoint.
"""

from __future__ import annotations

from pathlib import Path

from adloco.engine.driver import Driver, DriverSettings
from adloco.engine.loop import RoundLoop
from adloco.engine.spec import EngineSpec
from adloco.engine.state import WallClock


def build_engine(spec: EngineSpec) -> Driver:
    """The driver of the run's round loop; ``run()`` resumes from the last checkpoint."""
    wall_clock = WallClock()
    loop = RoundLoop(spec, wall_clock=wall_clock)
    return Driver(loop, spec.collective, driver_settings(spec), wall_clock)


def driver_settings(spec: EngineSpec) -> DriverSettings:
    """What the driver reads of the run: its checkpoints, progress and live curves."""
    return DriverSettings(
        checkpoint_dir=Path(spec.checkpoint_dir),
        fingerprint=spec.fingerprint(),
        checkpoint_every_rounds=spec.settings.checkpoint_every_rounds,
        label=spec.label,
        max_tokens=spec.settings.max_tokens,
        max_rounds=spec.settings.max_rounds,
        progress=spec.progress,
        resume_finished=spec.resume_finished,
        live_dir=None if spec.live_dir is None else Path(spec.live_dir),
        identity=spec.identity(),
    )
