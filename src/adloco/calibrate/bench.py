"""The bench both calibration measurements run on: the model on its device, the shared generator.

Part of ``adloco calibrate`` (:mod:`adloco.calibrate`): the max-batch search
(:mod:`adloco.calibrate.memory_search`) and the step timing
(:mod:`adloco.calibrate.step_timing`) train the same model with the same
inner optimizer settings and draw their random batches from one generator.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from adloco.model import DTYPES


def torch_device(device_cfg: dict) -> torch.device:
    """The torch device a configured device is measured on."""
    if device_cfg["kind"] != "cuda":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ValueError(f"device {device_cfg['name']} is kind cuda, but no CUDA device is visible")
    return torch.device("cuda", torch.cuda.current_device())


@dataclass
class Bench:
    """The model on its device and what both measurements share."""

    config: dict
    model: Any
    device: torch.device
    generator: torch.Generator
    vocab_size: int
    seq_len_tokens: int

    @property
    def train(self) -> dict:
        """The ``train`` section, every default filled in by the schema."""
        return self.config["train"]

    @property
    def autocast_dtype(self):
        dtype = self.config["calibration"]["dtype"]
        return None if dtype == "float32" else DTYPES[dtype]

    def optimizer(self, params, foreach=None):
        """The inner optimizer (AdamW) as the engine builds it."""
        return torch.optim.AdamW(
            params,
            lr=self.train["inner_lr"],
            betas=tuple(self.train["betas"]),
            weight_decay=self.train["weight_decay"],
            foreach=foreach,
        )
