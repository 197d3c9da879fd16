"""A trainer's data: its random subset of the train split and a resumable sampler.

Each trainer owns a random subset D_k of the train sequences (fraction
``subset_fraction``; subsets of different trainers may intersect). The sampler
walks a seeded permutation of D_k and starts a new permutation when it runs
out, so a trainer never stalls because its batch outgrew its data: it only
counts one more epoch. Its whole state is (epoch, position), which makes resume
exact: the permutation of an epoch is a pure function of (seed, epoch).
"""

from __future__ import annotations

import torch


def draw_subset(num_sequences: int, fraction: float, seed: int) -> torch.Tensor:
    """Sorted indices of a seeded random subset holding ``fraction`` of the sequences."""
    if num_sequences < 1:
        raise ValueError("the train split has no sequences")
    size = max(1, round(num_sequences * fraction))
    if size >= num_sequences:
        return torch.arange(num_sequences)
    gen = torch.Generator().manual_seed(seed)
    return torch.randperm(num_sequences, generator=gen)[:size].sort().values


class SubsetSampler:
    """Sequence indices from a subset, epoch after epoch, in seeded order."""

    def __init__(self, subset: torch.Tensor, seed: int, epoch: int = 0, position: int = 0):
        if subset.numel() == 0:
            raise ValueError("a trainer's data subset is empty")
        self.subset = subset.to(torch.long)
        self.seed = seed
        self.epoch = epoch
        self.position = position
        self._order = self._permutation(epoch)

    def _permutation(self, epoch: int) -> torch.Tensor:
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        return self.subset[torch.randperm(self.subset.numel(), generator=gen)]

    def take(self, count: int) -> torch.Tensor:
        """The next ``count`` indices; wraps into a new epoch when the subset runs out."""
        parts = []
        while count > 0:
            if self.position == self._order.numel():
                self.epoch += 1
                self.position = 0
                self._order = self._permutation(self.epoch)
            n = min(count, self._order.numel() - self.position)
            parts.append(self._order[self.position : self.position + n])
            self.position += n
            count -= n
        return torch.cat(parts) if parts else torch.empty(0, dtype=torch.long)

    def replace_subset(self, subset: torch.Tensor) -> None:
        """Continue on a new subset (after a merge) from the start of a fresh epoch."""
        self.subset = subset.to(torch.long)
        self.epoch += 1
        self.position = 0
        self._order = self._permutation(self.epoch)

    def state_dict(self) -> dict:
        return {
            "subset": self.subset.clone(),
            "seed": self.seed,
            "epoch": self.epoch,
            "position": self.position,
        }

    @classmethod
    def from_state_dict(cls, state: dict) -> SubsetSampler:
        return cls(state["subset"], state["seed"], state["epoch"], state["position"])
