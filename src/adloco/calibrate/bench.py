"""The bench both calibration measurements run on: the model on its device, the shared generator.

Part of ``adloco calibrate`` (:mod:`adloco.calibrate`): the max-batch search
(:mod:`adloco.calibrate.memory_search`) and the step timing
(:mod:`adloco.calibrate.step_timing`) train the same model, draw their random
batches from one generator, and run the engine's own inner step
(:mod:`adloco.engine.inner`): its optimizer (:func:`~adloco.engine.inner.make_optimizer`
with the ``train`` settings), its pass of one micro-batch
(:func:`~adloco.engine.inner.micro_batch_pass`) and its update, clipping then
the optimizer's step (:func:`~adloco.engine.inner.clip_and_step`). The pass
autocasts to ``calibration.dtype`` on every kind of device.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from adloco.config import CalibrationConfig, Config, DeviceConfig, RunSettings
from adloco.engine.inner import clip_and_step, make_optimizer, micro_batch_pass
from adloco.model.llama import DTYPES, build_model

GIB = 1 << 30


def memory_bytes(device: DeviceConfig) -> int:
    """The device's memory in bytes: ``memory_gib`` x 2^30, rounded down."""
    return int(device.memory_gib * GIB)


def torch_device(device: DeviceConfig) -> torch.device:
    """The torch device a configured device is measured on."""
    if device.kind != "cuda":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ValueError(f"device {device.name} is kind cuda, but no CUDA device is visible")
    return torch.device("cuda", torch.cuda.current_device())


@dataclass
class Bench:
    """The model on its device and what both measurements share."""

    model: torch.nn.Module
    device: torch.device
    generator: torch.Generator
    vocab_size: int
    seq_len_tokens: int
    settings: RunSettings
    """the ``train`` settings: the inner optimizer and the clipping norm"""
    calibration: CalibrationConfig

    @classmethod
    def build(
        cls, config: Config, device: DeviceConfig, vocab_size: int, seq_len_tokens: int
    ) -> Bench:
        """The configured model, seeded with ``seed``, on the device, and the generator.

        One generator for the search's batches, then the timing's: the order is
        part of the seed.
        """
        on = torch_device(device)
        model = build_model(config.model, vocab_size, seq_len_tokens, config.seed).to(on)
        model.train()
        generator = torch.Generator(device=on)
        generator.manual_seed(config.seed)
        return cls(
            model, on, generator, vocab_size, seq_len_tokens, config.train, config.calibration
        )

    @property
    def params(self) -> list[torch.Tensor]:
        return list(self.model.parameters())

    @property
    def param_bytes(self) -> int:
        """Bytes of the model's parameters."""
        return sum(p.numel() * p.element_size() for p in self.model.parameters())

    @property
    def autocast_dtype(self) -> torch.dtype | None:
        dtype = self.calibration.dtype
        return None if dtype == "float32" else DTYPES[dtype]

    @property
    def clip(self) -> float | None:
        return self.settings.grad_clip_norm

    def optimizer(self) -> torch.optim.Optimizer:
        """The inner optimizer over the model's parameters, as the engine builds it."""
        return make_optimizer(self.params, self.settings)

    def random_tokens(self, batch: int) -> torch.Tensor:
        """``batch`` sequences of random token ids from the shared generator."""
        shape = (batch, self.seq_len_tokens)
        return torch.randint(self.vocab_size, shape, device=self.device, generator=self.generator)

    def run_pass(self, ids: torch.Tensor) -> None:
        """The pass of one micro-batch of an inner step, backward of its mean loss."""
        micro_batch_pass(self.model, ids, ids.size(0) * (ids.size(1) - 1), self.autocast_dtype)

    def update(self, optimizer: torch.optim.Optimizer, params: list[torch.Tensor]) -> None:
        """The update of an inner step: clipping (when configured), then the optimizer's step."""
        clip_and_step(params, optimizer, self.clip)

    def describe_update(self) -> str:
        """The update in words, for the record."""
        step = (
            "AdamW step (foreach)"
            if self.settings.inner_optimizer == "adamw"
            else f"{self.settings.inner_optimizer.upper()} step"
        )
        return step + (f" after clip_grad_norm_ to {self.clip}" if self.clip is not None else "")
