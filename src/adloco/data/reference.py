"""Reference perplexities of the validation split: uniform, unigram and bigram.

Part of ``adloco tokenize``: the levels every perplexity of the report is
compared with. A model whose validation perplexity sits at or above the
unigram level has learnt no more than token frequencies, so a target there
cannot test anything the paper claims (docs/regime.md). Counts come from
the training splits (every split but validation), within packed sequences;
the predicted tokens are those a model predicts in
evaluation: positions 1 … L−1 of every validation sequence.

- uniform: the vocabulary size V;
- unigram, add-½ (Jeffreys) smoothing: p(w) = (c(w) + ½) / (N + V/2);
- bigram, Witten–Bell interpolation with that unigram:
  p(w | v) = (c(v, w) + T(v) p(w)) / (c(v) + T(v)), where c(v) counts the
  bigrams that start with v and T(v) the distinct tokens that follow v;
  p(w | v) = p(w) for a context never seen. It needs no tuned constant.

Bigram counts are kept sparse (sorted codes v·V + w), so a 32k vocabulary
costs memory in proportion to the distinct bigrams, not V².
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass

import numpy as np

UNIGRAM_SMOOTHING = "add-1/2 (Jeffreys): p(w) = (c(w) + 1/2) / (N + V/2)"
BIGRAM_SMOOTHING = (
    "Witten-Bell interpolation with the add-1/2 unigram: "
    "p(w|v) = (c(v,w) + T(v) p(w)) / (c(v) + T(v)), T(v) = distinct tokens after v"
)
# Sequences per chunk when counting: bounds the temporary arrays to a few MiB.
CHUNK_SEQUENCES = 4096


@dataclass(frozen=True)
class ReferencePerplexity:
    """The reference levels of a validation split (the manifest's ``reference_perplexity``)."""

    split: str
    counts_from: tuple[str, ...]
    predicted_tokens: int
    uniform: float
    unigram: float
    bigram: float
    unigram_smoothing: str = UNIGRAM_SMOOTHING
    bigram_smoothing: str = BIGRAM_SMOOTHING

    def as_dict(self) -> dict:
        return {**asdict(self), "counts_from": list(self.counts_from)}


class NgramCounts:
    """Unigram and sparse bigram counts over sequences of token ids in [0, V)."""

    def __init__(self, vocab_size: int):
        if vocab_size < 1:
            raise ValueError(f"vocab_size must be >= 1, got {vocab_size}")
        self.vocab_size = vocab_size
        self.unigram = np.zeros(vocab_size, dtype=np.int64)
        self._codes: list[np.ndarray] = []
        self._counts: list[np.ndarray] = []

    def add(self, sequences: np.ndarray) -> None:
        """Count the tokens of ``[n, L]`` sequences and their L − 1 bigrams each."""
        seqs = np.asarray(sequences, dtype=np.int64)
        if seqs.ndim != 2:
            raise ValueError(f"sequences must be [n, L], got shape {seqs.shape}")
        if seqs.size and (seqs.min() < 0 or seqs.max() >= self.vocab_size):
            raise ValueError(f"token ids outside [0, {self.vocab_size})")
        self.unigram += np.bincount(seqs.reshape(-1), minlength=self.vocab_size)
        codes, counts = np.unique(_pair_codes(seqs, self.vocab_size), return_counts=True)
        self._codes.append(codes)
        self._counts.append(counts)

    def bigrams(self) -> tuple[np.ndarray, np.ndarray]:
        """Distinct bigram codes v·V + w (sorted) and their counts."""
        if not self._codes:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        codes = np.concatenate(self._codes)
        counts = np.concatenate(self._counts)
        unique, inverse = np.unique(codes, return_inverse=True)
        summed = np.bincount(inverse, weights=counts, minlength=unique.size).astype(np.int64)
        self._codes, self._counts = [unique], [summed]
        return unique, summed


def _pair_codes(seqs: np.ndarray, vocab_size: int) -> np.ndarray:
    return (seqs[:, :-1] * vocab_size + seqs[:, 1:]).reshape(-1)


def unigram_probabilities(counts: NgramCounts) -> np.ndarray:
    """Add-½ unigram probabilities of every token id."""
    total = counts.unigram.sum()
    return (counts.unigram + 0.5) / (total + 0.5 * counts.vocab_size)


def bigram_log_probabilities(counts: NgramCounts, sequences: np.ndarray) -> np.ndarray:
    """log p(w | v) (Witten–Bell) of every predicted token (positions 1 … L−1) of ``sequences``."""
    v_size = counts.vocab_size
    p_uni = unigram_probabilities(counts)
    codes, pair_counts = counts.bigrams()
    context = codes // v_size
    c_context = np.bincount(context, weights=pair_counts, minlength=v_size)
    t_context = np.bincount(context, minlength=v_size).astype(np.float64)
    seqs = np.asarray(sequences, dtype=np.int64)
    queries = _pair_codes(seqs, v_size)
    where = np.searchsorted(codes, queries)
    found = where < codes.size
    found[found] = codes[where[found]] == queries[found]
    c_pair = np.zeros(queries.size, dtype=np.float64)
    c_pair[found] = pair_counts[where[found]]
    v, w = queries // v_size, queries % v_size
    denominator = c_context[v] + t_context[v]
    seen = denominator > 0
    p = p_uni[w].copy()
    p[seen] = (c_pair[seen] + t_context[v[seen]] * p_uni[w[seen]]) / denominator[seen]
    return np.log(p)


def reference_perplexity(
    train_chunks: Iterable[np.ndarray],
    validation: np.ndarray,
    vocab_size: int,
    counts_from: Iterable[str] = ("train",),
    split: str = "validation",
) -> ReferencePerplexity:
    """The three levels of ``validation`` ([n, L] ids) from counts over ``train_chunks``."""
    counts = NgramCounts(vocab_size)
    for chunk in train_chunks:
        counts.add(chunk)
    val = np.asarray(validation, dtype=np.int64)
    if val.ndim != 2 or val.shape[1] < 2 or val.shape[0] == 0:
        raise ValueError(f"validation must be [n >= 1, L >= 2] token ids, got {val.shape}")
    targets = val[:, 1:].reshape(-1)
    unigram_nll = -np.log(unigram_probabilities(counts)[targets]).mean()
    bigram_nll = -bigram_log_probabilities(counts, val).mean()
    return ReferencePerplexity(
        split=split,
        counts_from=tuple(counts_from),
        predicted_tokens=int(targets.size),
        uniform=float(vocab_size),
        unigram=float(math.exp(unigram_nll)),
        bigram=float(math.exp(bigram_nll)),
    )


def split_chunks(split, chunk: int = CHUNK_SEQUENCES) -> Iterable[np.ndarray]:
    """A :class:`adloco.data.reader.TokenSplit`'s sequences, ``chunk`` at a time."""
    for start in range(0, len(split), chunk):
        yield split.get_numpy(np.arange(start, min(start + chunk, len(split))))
