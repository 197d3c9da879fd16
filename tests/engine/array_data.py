"""Random token sequences with the reader's API, for engine tests and their subprocesses."""

from __future__ import annotations

import torch


class ArraySplit:
    def __init__(self, tokens: torch.Tensor):
        self.tokens = tokens

    def __len__(self) -> int:
        return self.tokens.size(0)

    def get(self, indices) -> torch.Tensor:
        return self.tokens[torch.as_tensor(indices, dtype=torch.long)]


class ArrayData:
    """Random token sequences with the reader's API (train and validation splits)."""

    def __init__(
        self, vocab_size: int = 64, seq_len: int = 12, n_train: int = 200, n_val: int = 24
    ):
        gen = torch.Generator().manual_seed(123)
        # A learnable pattern: token t+1 = (token t + 1) mod vocab, with noise.
        start = torch.randint(0, vocab_size, (n_train + n_val, 1), generator=gen)
        seqs = (start + torch.arange(seq_len)) % vocab_size
        noise = torch.rand(seqs.shape, generator=gen) < 0.2
        seqs = torch.where(noise, torch.randint(0, vocab_size, seqs.shape, generator=gen), seqs)
        self.splits = {
            "train": ArraySplit(seqs[:n_train]),
            "validation": ArraySplit(seqs[n_train:]),
        }
        self.vocab_size = vocab_size
        self.seq_len_tokens = seq_len
        self.manifest = {
            "splits": {"train": {"sequences": n_train}, "validation": {"sequences": n_val}}
        }
        self.tokenizer_dir = None

    def split(self, name: str) -> ArraySplit:
        return self.splits[name]
