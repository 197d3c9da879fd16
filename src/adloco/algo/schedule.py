"""Inner learning rate as a function of tokens seen.

The engine calls :func:`inner_lr` before every inner optimizer step. The
schedule is linear warmup over ``warmup_fraction · max_tokens`` tokens, then a
cosine from ``peak_lr`` down to ``min_lr_ratio · peak_lr`` at ``max_tokens``,
then that floor. It advances by tokens, not steps: an adaptive run takes
fewer, larger steps, and a step-based schedule would decay it more slowly per
token than the constant-batch run it is compared with.

:func:`lr_scale` states how the peak learning rate follows the batch: a
trainer whose local batch grew from ``initial_batch`` to b uses
peak_lr × (b / initial_batch)^p, with p = 0 (``none``), 1/2 (``sqrt``, the
square-root rule for Adam of Malladi et al. 2022) or 1 (``linear``, the rule
for SGD of Goyal et al. 2017).
"""

from __future__ import annotations

import math


def inner_lr(
    tokens_seen: float,
    max_tokens: float,
    peak_lr: float,
    warmup_fraction: float,
    min_lr_ratio: float,
) -> float:
    """Learning rate after ``tokens_seen`` tokens (0 at 0 tokens when there is warmup)."""
    if not max_tokens > 0:
        raise ValueError(f"max_tokens must be > 0, got {max_tokens}")
    if not peak_lr > 0:
        raise ValueError(f"peak_lr must be > 0, got {peak_lr}")
    if not 0 <= warmup_fraction <= 1:
        raise ValueError(f"warmup_fraction must be in [0, 1], got {warmup_fraction}")
    if not 0 <= min_lr_ratio <= 1:
        raise ValueError(f"min_lr_ratio must be in [0, 1], got {min_lr_ratio}")
    if not tokens_seen >= 0:
        raise ValueError(f"tokens_seen must be >= 0, got {tokens_seen}")
    warmup_tokens = warmup_fraction * max_tokens
    if tokens_seen < warmup_tokens:
        return peak_lr * tokens_seen / warmup_tokens
    min_lr = min_lr_ratio * peak_lr
    if tokens_seen >= max_tokens:
        return min_lr
    progress = (tokens_seen - warmup_tokens) / (max_tokens - warmup_tokens)
    return min_lr + (peak_lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))


LR_SCALING = {"none": 0.0, "sqrt": 0.5, "linear": 1.0}


def lr_scale(local_batch: float, initial_batch: float, rule: str) -> float:
    """Factor on the peak inner learning rate for a local batch (see the module docstring)."""
    if rule not in LR_SCALING:
        raise ValueError(f"lr_scaling must be one of {sorted(LR_SCALING)}, got {rule!r}")
    if not (local_batch > 0 and initial_batch > 0):
        raise ValueError(f"batches must be > 0, got {local_batch} and {initial_batch}")
    return (local_batch / initial_batch) ** LR_SCALING[rule]
