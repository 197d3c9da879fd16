"""Merge selection, weighted averaging and slot allocation (adloco.algo.merge)."""

from __future__ import annotations

import itertools
import math
import random

import pytest
import torch

from adloco.algo.merge import (
    allocate_slots,
    average_tensors,
    kept_trainer,
    local_batches,
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
    assert merged_batch([6, 2, 3], "max") == 6
    assert merged_batch([6, 2, 3], "sum") == 11
    with pytest.raises(ValueError, match="slot count"):
        merged_batch([6, 2], "per_node")
    with pytest.raises(ValueError, match="rule"):
        merged_batch([2], "min")
    with pytest.raises(ValueError, match="unknown trainer"):
        kept_trainer(batches, [9])
    with pytest.raises(ValueError, match="positive"):
        merge_weights([0, 2])


def reference_demand_after_merge(kept_batch_per_node: int, kept_nodes, absorbed_nodes) -> int:
    """The reference code's arithmetic: a trainer stores a batch per node and its demand is
    len(nodes) * current_batch_size; a merge keeps the kept trainer's per-node batch and
    hands it the absorbed trainer's nodes."""
    nodes = list(kept_nodes) + list(absorbed_nodes)
    return len(nodes) * kept_batch_per_node


@pytest.mark.parametrize(
    ("per_node", "kept_nodes", "absorbed"),
    [(4, 1, [1]), (4, 1, [1, 1]), (6, 2, [1]), (5, 3, [2, 4]), (1, 1, [1])],
)
def test_per_node_merged_batch_is_the_references_demand(per_node, kept_nodes, absorbed):
    # Global batches as the engine holds them: per-node batch x nodes.
    batches = [per_node * kept_nodes] + [3 * m for m in absorbed]
    slots = [kept_nodes, *absorbed]
    want = reference_demand_after_merge(per_node, range(kept_nodes), range(sum(absorbed)))
    assert merged_batch(batches, "per_node", slots) == want
    assert merged_batch(batches, slots=slots) == want  # the default rule


def test_per_node_rounds_an_uneven_split_half_up():
    # 5 sequences over 2 slots is 2.5 a slot; over 3 slots 7.5, rounded up to 8.
    assert merged_batch([5, 1], "per_node", [2, 1]) == 8
    assert merged_batch([7, 1], "per_node", [3, 1]) == 9  # 9.33 -> 9


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
    # D'Hondt on batches 4 : 12 over 8 slots gives exactly 2 : 6.
    assert slot_counts({0: 4, 1: 12}, 8) == {0: 2, 1: 6}
    # 10, 10, 12: after one slot each, 9 (12) then 2 and 4 (10 each, lower id first), then
    # 9 (6), then 2 (5 against 4's 5: lower id).
    assert slot_counts({4: 10, 2: 10, 9: 12}, 8) == {2: 3, 4: 2, 9: 3}
    # A trainer never gets more slots than sequences: 1 + 3 sequences leave 4 of 8 slots idle.
    assert slot_counts({0: 1, 1: 3}, 8) == {0: 1, 1: 3}
    assert allocate_slots({0: 1, 1: 3}, 8) == {0: 0, 1: 1, 2: 1, 3: 1}
    assert allocate_slots({0: 4, 1: 12}, 8) == {0: 0, 1: 0, 2: 1, 3: 1, 4: 1, 5: 1, 6: 1, 7: 1}
    with pytest.raises(ValueError, match="only 2 node slots"):
        allocate_slots({0: 1, 1: 1, 2: 1}, 2)
    with pytest.raises(ValueError, match="whole numbers"):
        slot_counts({0: 2.5}, 2)


def test_local_batches_add_up_to_the_global_batch():
    assert local_batches(13, [5, 2, 7]) == {2: 5, 5: 4, 7: 4}
    assert local_batches(4, [0, 1, 2, 3]) == dict.fromkeys(range(4), 1)
    for b in range(1, 40):
        for m in range(1, min(b, 9) + 1):
            sizes = list(local_batches(b, range(m)).values())
            assert sum(sizes) == b and max(sizes) == -(-b // m) and min(sizes) == b // m


def _best_largest_local_batch(batches: dict[int, int], num_slots: int) -> float:
    """Brute force: the smallest max_k B_k / M_k over all counts 1 <= M_k <= B_k, sum <= slots."""
    ids = sorted(batches)
    best = math.inf
    for counts in itertools.product(*(range(1, batches[t] + 1) for t in ids)):
        if sum(counts) <= num_slots:
            best = min(best, max(batches[t] / c for t, c in zip(ids, counts, strict=True)))
    return best


def test_allocation_is_optimal_and_leaves_no_slot_idle_with_work_on_a_grid():
    for num_slots in range(1, 9):
        for n in range(1, min(num_slots, 3) + 1):
            for combo in itertools.product([1, 2, 3, 5, 8, 13], repeat=n):
                batches = dict(enumerate(combo))
                counts = slot_counts(batches, num_slots)
                assert all(1 <= counts[t] <= batches[t] for t in batches)
                largest = max(batches[t] / counts[t] for t in batches)
                assert largest == pytest.approx(_best_largest_local_batch(batches, num_slots))
                # Idle slots only when every trainer runs one sequence per slot.
                if sum(counts.values()) < num_slots:
                    assert all(counts[t] == batches[t] for t in batches)
                alloc = allocate_slots(batches, num_slots)
                for t in batches:
                    mine = [s for s, owner in alloc.items() if owner == t]
                    assert sum(local_batches(batches[t], mine).values()) == batches[t]


def test_allocation_is_stable_and_moves_few_slots():
    batches = {0: 2, 1: 2, 2: 4, 3: 8}
    first = allocate_slots(batches, 8)
    assert allocate_slots(batches, 8, previous=first) == first
    # Trainer 1 merged into trainer 0: only trainer 1's slot changes hands.
    after = allocate_slots({0: 4, 2: 4, 3: 8}, 8, previous=first)
    moved = [s for s in first if first[s] != after[s]]
    assert all(first[s] == 1 for s in moved) and len(moved) == 1


def test_allocation_properties_on_random_batches():
    rng = random.Random(0)
    for _ in range(500):
        num_slots = rng.randint(1, 24)
        trainers = rng.sample(range(40), rng.randint(1, num_slots))
        batches = {t: rng.choice([1, rng.randint(1, 10), rng.randint(1, 64)]) for t in trainers}
        previous = {s: rng.choice(trainers + [99]) for s in range(num_slots)}
        alloc = allocate_slots(batches, num_slots, previous)
        counts = slot_counts(batches, num_slots)
        assert sum(counts.values()) == len(alloc) <= num_slots
        assert all(sum(1 for v in alloc.values() if v == t) == counts[t] for t in trainers)
        # The most slots that can stay put is sum over trainers of min(previous, new).
        kept = sum(1 for s in alloc if previous[s] == alloc[s])
        prev_counts = {t: sum(1 for v in previous.values() if v == t) for t in trainers}
        assert kept == sum(min(prev_counts[t], counts[t]) for t in trainers)
        assert allocate_slots(batches, num_slots, previous) == alloc  # deterministic
