"""Equal budgets: the last round is cut to the sequences left (adloco.algo.budget)."""

from __future__ import annotations

import itertools

import pytest

from adloco.algo.budget import proportional_split, round_step_sequences
from adloco.algo.switch import plan_step, step_micro_batches


def test_proportional_split_hand_values():
    assert proportional_split(5, [4, 4, 2]) == [2, 2, 1]
    assert proportional_split(3, [4, 4]) == [2, 1]  # tie: earlier entry
    assert proportional_split(0, [3, 1]) == [0, 0]
    assert proportional_split(4, [4, 0]) == [4, 0]
    with pytest.raises(ValueError, match="cannot split"):
        proportional_split(9, [4, 4])


def test_full_round_when_the_budget_allows():
    assert round_step_sequences({0: 4, 1: 3}, 3, 21) == {0: [4, 4, 4], 1: [3, 3, 3]}


def test_last_round_is_cut_to_the_sequences_left():
    # 7 sequences per step; 17 left: 2 full steps (14), then 3 split 4 : 3 as 2 and 1.
    got = round_step_sequences({0: 4, 1: 3}, 10, 17)
    assert got == {0: [4, 4, 2], 1: [3, 3, 1]}
    # 1 left over 2 slots: the second slot runs one step fewer.
    assert round_step_sequences({0: 4, 1: 3}, 10, 8) == {0: [4, 1], 1: [3]}


def test_every_cut_round_spends_exactly_what_is_left():
    for batches in ([1], [4, 4], [5, 3, 2], [13, 13, 1, 7]):
        step = dict(enumerate(batches))
        for h, left in itertools.product([1, 3, 10], range(1, 3 * sum(batches) * 3)):
            got = round_step_sequences(step, h, left)
            total = sum(sum(v) for v in got.values())
            assert total == min(left, h * sum(batches))
            assert all(all(1 <= n <= step[s] for n in v) for s, v in got.items())
            lengths = {len(v) for v in got.values()}
            assert max(lengths) <= h and max(lengths) - min(lengths) <= 1


def test_step_micro_batches_cut_last_step_and_stats_groups():
    plan = plan_step(11, 4, "switch", 2.0)  # accumulate: 4, 4, 3
    steps = step_micro_batches(plan, [11, 11, 6])
    assert steps == [(4, 4, 3), (4, 4, 3), (3, 3)]
    # The first step as 4 statistics groups (more than its 3 passes).
    assert step_micro_batches(plan, [11, 5], stats_groups=4) == [(3, 3, 3, 2), (3, 2)]
    # Never more groups than sequences.
    small = plan_step(2, 4, "switch", 2.0)
    assert step_micro_batches(small, [2, 2], stats_groups=4) == [(1, 1), (2,)]
