"""A trainer's data subset and its sampler (adloco.engine.sampler).

The subset is a seeded sample of the train split; the sampler walks one seeded
permutation of it per epoch. Checked: determinism, every epoch a permutation
(no index twice before the subset is used up), wrapping into the next epoch,
and a resume from ``state_dict`` (through ``torch.save``) that continues the
same stream: nothing drawn before the checkpoint is drawn again in its epoch.
"""

from __future__ import annotations

import io
from collections import Counter

import pytest
import torch

from adloco.engine.sampler import SubsetSampler, draw_subset


def stream(sampler: SubsetSampler, counts: list[int]) -> list[int]:
    return [i for count in counts for i in sampler.take(count).tolist()]


def reloaded(sampler: SubsetSampler) -> SubsetSampler:
    """A sampler restored from ``sampler``'s state, as a checkpoint stores it."""
    buffer = io.BytesIO()
    torch.save(sampler.state_dict(), buffer)
    buffer.seek(0)
    return SubsetSampler.from_state_dict(torch.load(buffer, weights_only=True))


def test_subset_is_a_seeded_sorted_sample_of_the_right_size():
    subset = draw_subset(1000, 0.05, seed=7)
    assert len(subset) == 50
    assert subset.tolist() == sorted(set(subset.tolist()))
    assert 0 <= int(subset.min()) and int(subset.max()) < 1000
    # A pure function of the seed: the same seed gives the same subset, another seed another.
    gen = torch.Generator().manual_seed(7)
    assert subset.tolist() == sorted(torch.randperm(1000, generator=gen)[:50].tolist())
    assert torch.equal(subset, draw_subset(1000, 0.05, seed=7))
    assert not torch.equal(subset, draw_subset(1000, 0.05, seed=8))


def test_subset_edge_cases():
    assert draw_subset(10, 1.0, seed=0).tolist() == list(range(10))
    assert len(draw_subset(10, 0.001, seed=0)) == 1  # never empty
    with pytest.raises(ValueError, match="no sequences"):
        draw_subset(0, 0.5, seed=0)
    with pytest.raises(ValueError, match="empty"):
        SubsetSampler(torch.empty(0, dtype=torch.long), seed=0)


def test_each_epoch_is_the_seeded_permutation_of_the_subset():
    subset = torch.tensor([3, 8, 15, 21, 40, 41, 77])
    sampler = SubsetSampler(subset, seed=5)
    drawn = stream(sampler, [2, 3, 2, 4])  # 7 = one epoch, then 4 of the next
    for epoch, part in ((0, drawn[:7]), (1, drawn[7:])):
        gen = torch.Generator().manual_seed(5 * 1_000_003 + epoch)
        expected = subset[torch.randperm(len(subset), generator=gen)].tolist()
        assert part == expected[: len(part)]
    assert sorted(drawn[:7]) == subset.tolist()
    assert (sampler.epoch, sampler.position) == (1, 4)


def test_same_seed_same_stream_other_seed_other_order():
    subset = draw_subset(500, 0.2, seed=1)
    one = stream(SubsetSampler(subset, seed=3), [16, 16, 16])
    two = stream(SubsetSampler(subset, seed=3), [48])
    other = stream(SubsetSampler(subset, seed=4), [48])
    assert one == two
    assert one != other and sorted(one) != one


@pytest.mark.parametrize("drawn_before", [1, 37, 99, 100, 101, 250])
def test_resume_continues_the_stream_without_repeating_an_index_in_its_epoch(drawn_before):
    subset = draw_subset(1000, 0.1, seed=11)  # 100 sequences
    counts_after = [9] * 40
    whole = SubsetSampler(subset, seed=2)
    expected = stream(whole, [drawn_before, *counts_after])

    first = SubsetSampler(subset, seed=2)
    before = stream(first, [drawn_before])
    after = stream(reloaded(first), counts_after)
    assert before + after == expected
    # Within every epoch, what came before the resume and what came after are
    # disjoint, and together the epoch covers the subset exactly once.
    for start in range(0, len(expected) - len(subset) + 1, len(subset)):
        epoch = expected[start : start + len(subset)]
        assert Counter(epoch) == Counter(subset.tolist())
    epoch_start = (drawn_before // len(subset)) * len(subset)
    done = set(before[epoch_start:])
    rest_of_epoch = after[: len(subset) - len(done)]
    assert done.isdisjoint(rest_of_epoch)
    assert done | set(rest_of_epoch) == set(subset.tolist())


def test_a_new_subset_starts_a_fresh_epoch_and_resumes_too():
    sampler = SubsetSampler(torch.arange(0, 10), seed=9)
    sampler.take(4)
    merged = torch.arange(100, 120)
    sampler.replace_subset(merged)
    assert (sampler.epoch, sampler.position) == (1, 0)
    first = sampler.take(5).tolist()
    assert set(first) <= set(merged.tolist())
    resumed = reloaded(sampler)
    rest = resumed.take(15).tolist()
    assert sorted(first + rest) == merged.tolist()
    assert rest == stream(sampler, [15])
