"""Exact per-sample gradient statistics, the reference the cheap ones are tested against.

The training engine never calls this: it forms one gradient per sequence
(``torch.func.vmap`` over ``grad`` of a ``functional_call``), which costs n × D
memory. It serves the tests of :mod:`adloco.algo.accumulate` and
:mod:`adloco.algo.estimators` and the variance analysis stage (``adloco
variance``), which compares batch gradients with a full gradient on a small
sample. ``vmap`` works with the transformers Llama
model (SDPA attention falls back to a per-sample loop inside vmap on CPU, which
is slower but exact); :func:`per_sample_grads_loop` is the plain alternative.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence

import torch
from torch.func import functional_call, grad, vmap

from adloco.algo.estimators import VarianceEstimate
from adloco.model.llama import causal_lm_loss

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def sequence_mean_loss(logits: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
    """Mean next-token loss over the predicted tokens of ``input_ids`` (one shift)."""
    loss_sum, n_tokens = causal_lm_loss(logits, input_ids)
    return loss_sum / n_tokens.clamp_min(1)


def _trainable(model: torch.nn.Module) -> list[tuple[str, torch.nn.Parameter]]:
    # named_parameters() drops tied duplicates (embedding and LM head), which
    # is what functional_call expects: tied weights follow the one given.
    return [(name, p) for name, p in model.named_parameters() if p.requires_grad]


def per_sample_grads(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    loss_fn: LossFn | None = None,
    *,
    chunk_size: int | None = None,
) -> list[torch.Tensor]:
    """Gradient of each sequence's own mean loss, one ``[n, *param.shape]`` tensor per parameter.

    Parameters are those of ``model.named_parameters()`` with ``requires_grad``,
    in that order. ``loss_fn(logits, input_ids)`` defaults to the mean
    next-token loss of :func:`adloco.model.llama.causal_lm_loss`. ``chunk_size``
    bounds how many sequences vmap processes at once (memory).
    """
    if input_ids.dim() != 2 or input_ids.size(0) < 1:
        raise ValueError(
            f"input_ids must be [n, seq_len] with n >= 1, got {tuple(input_ids.shape)}"
        )
    loss_fn = loss_fn or sequence_mean_loss
    named = _trainable(model)
    params = {name: p.detach() for name, p in named}

    def one_loss(p: dict[str, torch.Tensor], ids: torch.Tensor) -> torch.Tensor:
        batch = ids.unsqueeze(0)
        logits = functional_call(model, p, (batch,), kwargs={"use_cache": False}).logits
        return loss_fn(logits, batch)

    with warnings.catch_warnings():
        # "no batching rule for scaled_dot_product_attention": vmap loops
        # internally, which is correct, only slower.
        warnings.filterwarnings("ignore", message=".*batching rule.*")
        grads = vmap(grad(one_loss), in_dims=(None, 0), chunk_size=chunk_size)(params, input_ids)
    return [grads[name] for name, _ in named]


def per_sample_grads_loop(
    model: torch.nn.Module, input_ids: torch.Tensor, loss_fn: LossFn | None = None
) -> list[torch.Tensor]:
    """Same result as :func:`per_sample_grads` by one backward pass per sequence."""
    if input_ids.dim() != 2 or input_ids.size(0) < 1:
        raise ValueError(
            f"input_ids must be [n, seq_len] with n >= 1, got {tuple(input_ids.shape)}"
        )
    loss_fn = loss_fn or sequence_mean_loss
    params = [p for _, p in _trainable(model)]
    rows: list[list[torch.Tensor]] = []
    for ids in input_ids:
        batch = ids.unsqueeze(0)
        loss = loss_fn(model(input_ids=batch, use_cache=False).logits, batch)
        rows.append([g.detach() for g in torch.autograd.grad(loss, params)])
    return [torch.stack([row[j] for row in rows]) for j in range(len(params))]


def exact_estimate(
    per_sample: Sequence[torch.Tensor], direction: Sequence[torch.Tensor] | None = None
) -> VarianceEstimate:
    """tr Σ (divisor n − 1), ‖mean‖², and the variances along/orthogonal to a unit ``direction``.

    ``per_sample``: one ``[n, *shape]`` tensor per parameter. ``direction``: one
    tensor per parameter (normalised here). Computed in float64.
    """
    if not per_sample:
        raise ValueError("exact_estimate needs at least one parameter")
    n = per_sample[0].shape[0]
    if n < 2:
        raise ValueError(f"exact_estimate needs at least 2 samples, got {n}")
    flat = torch.cat([t.reshape(n, -1).double() for t in per_sample], dim=1)
    mean = flat.mean(dim=0)
    centred = flat - mean
    trace_cov = float((centred * centred).sum() / (n - 1))
    batch_grad_sqnorm = float(mean @ mean)
    ip_var = orth_var = None
    if direction is not None:
        d = torch.cat([t.reshape(-1).double() for t in direction])
        if d.numel() != flat.shape[1]:
            raise ValueError(f"direction has {d.numel()} entries, gradients have {flat.shape[1]}")
        norm = torch.linalg.vector_norm(d)
        if norm == 0 or not torch.isfinite(norm):
            raise ValueError("direction must be non-zero and finite")
        proj = centred @ (d / norm)
        ip_var = float((proj * proj).sum() / (n - 1))
        orth_var = trace_cov - ip_var
    return VarianceEstimate(
        trace_cov=trace_cov,
        grad_sqnorm=batch_grad_sqnorm - trace_cov / n,
        batch_grad_sqnorm=batch_grad_sqnorm,
        ip_var=ip_var,
        orth_var=orth_var,
        groups=n,
        samples=n,
        dof=n - 1,
    )
