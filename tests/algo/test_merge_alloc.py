"""Merge selection, weighted averaging and slot allocation (adloco.algo.merge)."""

from __future__ import annotations

import math
import random

import pytest
import torch

from adloco.algo.merge import (
    allocate_slots,
    average_tensors,
    kept_trainer,
    merge_weights,
    merged_batch,
    select_for_merge,
    slot_counts,
)
from adloco.algo.outer import make_outer_optimizer, momentum_buffers, outer_step


def test_selection_picks_smallest_batches_with_ties_to_lower_id():
    batches = {0: 4, 1: 2, 2: 2, 3: 8}
    assert select_for_merge(batches, 2) == [1, 2]
    assert select_for_merge(batches, 3) == [1, 2, 0]
    assert select_for_merge({5: 1, 3: 1, 4: 1}, 2) == [3, 4]
    assert select_for_merge(batches, 10) == [1, 2, 0, 3]
    assert select_for_merge({7: 3}, 2) == []
    assert select_for_merge({}, 2) == []
    with pytest.raises(ValueError, match="merge count"):
        select_for_merge(batches, 1)


def test_kept_trainer_weights_and_merged_batch():
    batches = {0: 4, 1: 2, 2: 4, 3: 8}
    assert kept_trainer(batches, [1, 0]) == 0
    assert kept_trainer(batches, [2, 0, 1]) == 0  # tie 4 = 4 -> lower id
    assert kept_trainer(batches, [3, 1]) == 3
    assert merge_weights([2, 6]) == [0.25, 0.75]
    assert merge_weights([3, 3, 6]) == [0.25, 0.25, 0.5]
    assert merged_batch([2, 6, 3]) == 6
    with pytest.raises(ValueError, match="unknown trainer"):
        kept_trainer(batches, [9])
    with pytest.raises(ValueError, match="positive"):
        merge_weights([0, 2])


def test_weighted_average_of_params_and_momentum_is_exact():
    # Two trainers' outer states after one Nesterov step each, merged with
    # batch weights 1 : 3 (batch sizes 2 and 6).
    states = []
    for start, target in ((1.0, 0.5), (-2.0, 0.0)):
        params = [torch.full((2, 3), start), torch.full((4,), 2 * start)]
        opt = make_outer_optimizer(params, lr=0.5, momentum=0.9, nesterov=True)
        outer_step(opt, params, [torch.full((2, 3), target), torch.full((4,), 2 * target)])
        states.append((params, momentum_buffers(opt, params)))
    w = merge_weights([2, 6])
    merged_params = average_tensors([s[0] for s in states], w)
    merged_momentum = average_tensors([s[1] for s in states], w)
    # Trainer A: Δ = 0.5, buffer 0.5, θ = 1 - 0.5 (0.5 + 0.9 * 0.5) = 0.525.
    # Trainer B: Δ = -2,  buffer -2,  θ = -2 - 0.5 (-2 - 1.8) = -0.1.
    assert torch.equal(states[0][1][0], torch.full((2, 3), 0.5))
    torch.testing.assert_close(merged_params[0], torch.full((2, 3), 0.25 * 0.525 + 0.75 * -0.1))
    torch.testing.assert_close(merged_params[1], torch.full((4,), 2 * (0.25 * 0.525 + 0.75 * -0.1)))
    torch.testing.assert_close(merged_momentum[0], torch.full((2, 3), 0.25 * 0.5 + 0.75 * -2.0))
    torch.testing.assert_close(merged_momentum[1], torch.full((4,), 2 * (0.25 * 0.5 + 0.75 * -2.0)))


def test_average_tensors_normalises_weights_and_keeps_dtype():
    a = [torch.tensor([1.0, 2.0]), torch.tensor([[0.0]])]
    b = [torch.tensor([3.0, 6.0]), torch.tensor([[4.0]])]
    out = average_tensors([a, b], [100, 300])  # token counts, not shares
    assert torch.equal(out[0], torch.tensor([2.5, 5.0]))
    assert torch.equal(out[1], torch.tensor([[3.0]]))
    half = average_tensors([[t.bfloat16() for t in a], [t.bfloat16() for t in b]], [1, 1])
    assert half[0].dtype == torch.bfloat16 and torch.equal(
        half[0].float(), torch.tensor([2.0, 4.0])
    )
    with pytest.raises(ValueError, match="shape"):
        average_tensors([a, [torch.zeros(3), torch.zeros(1, 1)]], [1, 1])
    with pytest.raises(ValueError, match="weights"):
        average_tensors([a, b], [0, 0])


def test_allocation_hand_examples():
    assert slot_counts({0: 1.0, 1: 3.0}, 8) == {0: 2, 1: 6}
    # Quotas 1/3, 1/3, 10/3: the floor of one slot each overshoots, trainer 2 gives one back.
    assert slot_counts({0: 1.0, 1: 1.0, 2: 10.0}, 4) == {0: 1, 1: 1, 2: 2}
    # Quotas 2.5, 2.5, 3: the spare slot goes to the lower id on the tie.
    assert slot_counts({4: 5.0, 2: 5.0, 9: 6.0}, 8) == {2: 3, 4: 2, 9: 3}
    assert allocate_slots({0: 1.0, 1: 3.0}, 8) == {0: 0, 1: 0, 2: 1, 3: 1, 4: 1, 5: 1, 6: 1, 7: 1}
    assert slot_counts({0: 0.0, 1: 0.0}, 5) == {0: 3, 1: 2}
    with pytest.raises(ValueError, match="only 2 node slots"):
        allocate_slots({0: 1.0, 1: 1.0, 2: 1.0}, 2)


def test_allocation_is_stable_and_moves_few_slots():
    demands = {0: 2.0, 1: 2.0, 2: 4.0, 3: 8.0}
    first = allocate_slots(demands, 8)
    assert allocate_slots(demands, 8, previous=first) == first
    # Trainer 1 merged into trainer 0: only trainer 1's slot changes hands.
    after = allocate_slots({0: 4.0, 2: 4.0, 3: 8.0}, 8, previous=first)
    moved = [s for s in first if first[s] != after[s]]
    assert all(first[s] == 1 for s in moved) and len(moved) == 1


def test_allocation_properties_on_random_demands():
    rng = random.Random(0)
    for _ in range(500):
        num_slots = rng.randint(1, 24)
        trainers = rng.sample(range(40), rng.randint(1, num_slots))
        demands = {
            t: rng.choice([0.0, rng.uniform(0, 10), float(rng.randint(1, 64))]) for t in trainers
        }
        previous = {s: rng.choice(trainers + [99]) for s in range(num_slots)}
        alloc = allocate_slots(demands, num_slots, previous)
        counts = slot_counts(demands, num_slots)
        assert sorted(alloc) == list(range(num_slots))
        assert sum(counts.values()) == num_slots
        assert all(counts[t] >= 1 for t in trainers)
        assert all(sum(1 for v in alloc.values() if v == t) == counts[t] for t in trainers)
        total = sum(demands.values())
        if total > 0:
            quotas = {t: num_slots * demands[t] / total for t in trainers}
            if all(q >= 1 for q in quotas.values()):
                assert all(
                    math.floor(quotas[t]) <= counts[t] <= math.ceil(quotas[t]) for t in trainers
                )
        # The most slots that can stay put is sum over trainers of min(previous, new).
        kept = sum(1 for s in alloc if previous[s] == alloc[s])
        prev_counts = {t: sum(1 for v in previous.values() if v == t) for t in trainers}
        assert kept == sum(min(prev_counts[t], counts[t]) for t in trainers)
        assert allocate_slots(demands, num_slots, previous) == alloc  # deterministic
