"""Reference perplexities: uniform, add-½ unigram and Witten–Bell bigram against closed forms."""

from __future__ import annotations

import math

import numpy as np
import pytest

from adloco.data.reference import NgramCounts, bigram_log_probabilities, reference_perplexity

# Vocabulary {0, 1, 2}; two training sequences of 4 tokens.
TRAIN = np.array([[0, 1, 0, 1], [0, 1, 1, 2]])
VALID = np.array([[0, 1, 2], [2, 0, 1]])


def test_counts_of_a_toy_corpus():
    counts = NgramCounts(3)
    counts.add(TRAIN)
    assert counts.unigram.tolist() == [3, 4, 1]
    codes, n = counts.bigrams()
    # bigrams: (0,1) x3, (1,0) x1, (1,1) x1, (1,2) x1
    assert dict(zip(codes.tolist(), n.tolist(), strict=True)) == {1: 3, 3: 1, 4: 1, 5: 1}


def test_levels_of_a_toy_corpus_against_their_closed_forms():
    ref = reference_perplexity([TRAIN[:1], TRAIN[1:]], VALID, 3, counts_from=["train"])
    # Unigram, add-1/2: N = 8, V = 3 -> p = (c + 1/2) / 9.5.
    p = {0: 3.5 / 9.5, 1: 4.5 / 9.5, 2: 1.5 / 9.5}
    targets = [1, 2, 0, 1]  # positions 1.. of each validation sequence
    unigram = math.exp(-sum(math.log(p[w]) for w in targets) / 4)
    # Witten-Bell: c(0) = 3, T(0) = 1; c(1) = 3, T(1) = 3; c(2) = 0 (unseen context).
    p_1_0 = (3 + 1 * p[1]) / (3 + 1)  # p(1 | 0)
    p_2_1 = (1 + 3 * p[2]) / (3 + 3)  # p(2 | 1)
    p_0_2 = p[0]  # context 2 never seen: the unigram
    bigram = math.exp(-(2 * math.log(p_1_0) + math.log(p_2_1) + math.log(p_0_2)) / 4)
    assert ref.uniform == 3.0
    assert ref.predicted_tokens == 4
    assert ref.unigram == pytest.approx(unigram, rel=1e-12)
    assert ref.bigram == pytest.approx(bigram, rel=1e-12)
    assert ref.as_dict()["counts_from"] == ["train"]


def test_chunking_does_not_change_the_counts():
    rng = np.random.default_rng(0)
    train = rng.integers(0, 50, size=(40, 16))
    valid = rng.integers(0, 50, size=(5, 16))
    whole = reference_perplexity([train], valid, 50)
    chunked = reference_perplexity(np.array_split(train, 7), valid, 50)
    assert chunked == whole


def test_bigram_probabilities_sum_to_one_over_the_vocabulary():
    rng = np.random.default_rng(1)
    v = 12
    counts = NgramCounts(v)
    counts.add(rng.integers(0, v, size=(20, 9)))
    for context in range(v):
        pairs = np.array([[context, w] for w in range(v)])
        total = np.exp(bigram_log_probabilities(counts, pairs)).sum()
        assert total == pytest.approx(1.0, abs=1e-12)


def test_a_model_of_the_data_beats_uniform_and_the_bigram_beats_the_unigram():
    # A corpus with strong bigram structure: w_{t+1} = (w_t + 1) mod V, mostly.
    rng = np.random.default_rng(2)
    v = 30
    seqs = np.cumsum(np.where(rng.random((200, 20)) < 0.9, 1, 7), axis=1) % v
    ref = reference_perplexity([seqs[:180]], seqs[180:], v)
    assert ref.bigram < ref.unigram < ref.uniform


def test_out_of_range_ids_are_refused():
    with pytest.raises(ValueError, match="outside"):
        NgramCounts(3).add(np.array([[0, 3]]))
