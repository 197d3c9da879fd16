"""What a method supplies to the engine: its optimizer of θ, how it synchronises, its rules.

The engine (:mod:`adloco.engine.loop`, :mod:`adloco.engine.driver`) names no
method; it asks the run's :class:`Method`:

- ``outer_step``: True for the DiLoCo family (``diloco``, ``localsgd``,
  ``adloco``): each slot runs its inner steps alone, and once per round the
  trainer averages the slots' pseudo-gradients and takes an outer SGD step.
  False for ``ddp`` (:mod:`adloco.engine.ddp`): every step's gradient is
  all-reduced and one optimizer, with the inner optimizer's settings, steps θ;
  there is no outer step.
- :meth:`Method.make_optimizer`: the trainer's optimizer of θ;
- :meth:`Method.step_batch`: the batch one optimizer step averages over, for
  the learning-rate scaling;
- :meth:`Method.all_reduces`: a trainer's all-reduces in a round;
- ``rules``: the settings the method fixes (``adloco.config.runs.METHOD_RULES``).

``METHODS`` holds one entry per key of ``METHOD_RULES``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from adloco.algo import outer
from adloco.config.runs import METHOD_RULES, PER_STEP_SYNC
from adloco.engine import ddp


@dataclass(frozen=True)
class Method:
    name: str  # the run's ``method``
    outer_step: bool  # an outer step per round (else every step all-reduced, as ddp)

    @property
    def per_step_sync(self) -> bool:
        """Whether the trainer's nodes all-reduce after every step rather than once a round."""
        return not self.outer_step

    @property
    def rules(self) -> dict[str, Any]:
        """The settings the method fixes (``adloco.config.runs.METHOD_RULES``)."""
        return METHOD_RULES[self.name]

    def make_optimizer(self, params: list[torch.Tensor], settings) -> torch.optim.Optimizer:
        """The trainer's optimizer of θ: outer SGD, or the optimizer of every step."""
        if self.outer_step:
            return outer.make_outer_optimizer(
                params, settings.outer_lr, settings.outer_momentum, settings.nesterov
            )
        return ddp.make_optimizer(params, settings)

    def step_batch(self, trainer_batch: float, slots: int) -> float:
        """The batch one optimizer step averages over: a slot's, or the trainer's."""
        return trainer_batch / slots if self.outer_step else trainer_batch

    def all_reduces(self, steps: int) -> int:
        """A trainer's all-reduces in a round of ``steps`` inner steps."""
        return steps if self.per_step_sync else 1


METHODS: dict[str, Method] = {
    m.name: m for m in (Method(name, outer_step=name not in PER_STEP_SYNC) for name in METHOD_RULES)
}


def get(name: str) -> Method:
    """The method ``name`` (ValueError naming the choices otherwise)."""
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; expected one of {', '.join(METHODS)}")
    return METHODS[name]
