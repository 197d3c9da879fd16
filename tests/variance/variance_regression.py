"""Linear regression called like a causal LM, for the variance tests: its figures have
closed forms (per-sample gradients written by hand)."""

from __future__ import annotations

from types import SimpleNamespace

import torch


class LinearRegression(torch.nn.Module):
    """ŷ = xᵀw, called like a causal LM: rows are [x, y], the output has ``.logits``."""

    def __init__(self, w: torch.Tensor):
        super().__init__()
        self.w = torch.nn.Parameter(w.clone())

    def forward(self, input_ids, use_cache=False):
        return SimpleNamespace(logits=input_ids[:, :-1] @ self.w)


def squared_loss(prediction, rows):
    """(Σ ½(ŷ − y)², number of rows): one 'token' per row."""
    residual = prediction - rows[:, -1]
    return 0.5 * (residual * residual).sum(), torch.tensor(rows.shape[0])


def regression_sample(n: int, d: int, noise: float, delta_norm: float, seed: int):
    """Rows [x, y] with x ~ N(0, I), y = xᵀw* + ε, and w = w* + δ."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=gen, dtype=torch.float64)
    w_star = torch.randn(d, generator=gen, dtype=torch.float64)
    y = x @ w_star + noise * torch.randn(n, generator=gen, dtype=torch.float64)
    delta = torch.randn(d, generator=gen, dtype=torch.float64)
    delta = delta * (delta_norm / delta.norm())
    return torch.cat([x, y[:, None]], dim=1), w_star + delta


def closed_form_grads(rows: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """g_i = (x_iᵀw − y_i) x_i, by hand."""
    x, y = rows[:, :-1], rows[:, -1]
    return (x @ w - y)[:, None] * x
