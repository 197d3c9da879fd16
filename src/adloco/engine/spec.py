"""What one seed of a run is trained from, resolved once: :class:`EngineSpec`.

``adloco train`` (:mod:`adloco.train_run`) reads the configuration, the
calibration records, the data and the base model, and resolves them into one
frozen value; :func:`adloco.engine.compose.build_engine` builds the round loop
and its driver from it, and the fingerprint that a resumed checkpoint must
match is a function of it alone (:meth:`EngineSpec.fingerprint`). The engine
reads no configuration file and no command line, so a test, the report's
fixture or a benchmark builds an engine the way the stage does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from adloco.config import ClusterConfig, ModelConfig, RunSettings, thaw
from adloco.engine import checkpoint, checkpoint_identity
from adloco.engine.collective import LocalCollective
from adloco.formats.clock import StepTimeCurve


@dataclass(frozen=True)
class EngineSpec:
    """One seed of a run: its settings, inputs, clock, folders and process."""

    settings: RunSettings  # the run's training settings (Config.run)
    seed: int  # the training seed
    # The tokenized data (adloco.data.reader.TokenData, or an object of its API:
    # split, vocab_size, seq_len_tokens, manifest, tokenizer_dir).
    data: Any
    model: ModelConfig  # the model, its base resolved (adloco.model.base.start_model)
    cluster: ClusterConfig  # the run's cluster (ClusterConfig.for_run)
    max_batches: Mapping[str, int]  # each device's largest pass, sequences (calibration)
    curves: Mapping[str, StepTimeCurve]  # each device's step time, the simulated clock's
    checkpoint_dir: Path  # the run's checkpoint folder (its metrics file inside)
    # The checksums of the base model's files (StartModel.base_sha256): part of
    # the fingerprint, so a new base starts the run over (None: no base).
    base_sha256: Mapping[str, str] | None = None
    # Where the run's inner and outer lr are written (Config.setting_key), for
    # the message of a diverged round.
    lr_keys: tuple[str, str] = ("inner_lr", "outer_lr")
    # The configuration's experiment: with the run's name and the seed, whose
    # checkpoints the folder holds (checkpoint_identity.identity).
    experiment: str | None = None
    live_dir: Path | None = None  # the folder of the run's live curves (None: none)
    progress: bool = True  # a bar on a terminal (else one log line per round)
    # A finished checkpoint of the same fingerprint is resumed rather than
    # trained again (adloco train --seed all re-writing a killed job's seeds).
    resume_finished: bool = False
    device: torch.device = torch.device("cpu")  # where θ and the passes live
    # The processes the slots are spread over (adloco.engine.distributed's
    # TorchCollective under torchrun; one process: LocalCollective).
    collective: Any = field(default_factory=LocalCollective)

    @property
    def label(self) -> str:
        """The run as progress and the log name it."""
        return f"{self.settings.name} seed {self.seed}"

    def identity(self) -> dict:
        """Whose checkpoints these are (:func:`adloco.engine.checkpoint_identity.identity`)."""
        return checkpoint_identity.identity(self.experiment, self.settings.name, self.seed)

    def fingerprint(self) -> str:
        """What a checkpoint must have been trained under to be resumed (its hash).

        The run's settings, the seed, the model (with the base's checksums), the
        cluster, the devices' max batches and curves and the data's splits;
        not the folders, the progress, the device or the processes.
        """
        model_entry = thaw(self.model)
        if self.base_sha256 is not None:
            model_entry["base"] = dict(self.base_sha256)
        return checkpoint.fingerprint(
            {
                "run": asdict(self.settings),
                "seed": self.seed,
                "model": model_entry,
                # How many processes run the slots does not change the trajectory,
                # so a run may resume under another number of them.
                "cluster": {
                    k: v for k, v in thaw(self.cluster).items() if k != "processes_per_machine"
                },
                "max_batches": dict(self.max_batches),
                "curves": {name: c.as_dict() for name, c in sorted(self.curves.items())},
                "data": self.data.manifest.get("splits"),
            }
        )
