"""Node slots, trainers, a trainer's round and its row, merging a group, sync payloads."""

from __future__ import annotations

import pytest
from array_data import make_engine


@pytest.mark.parametrize("mode", ["scalars", "vector"])
def test_statistics_bytes_per_communication(array_data, make_config, tmp_path, mode):
    # A trainer of M slots: each all-reduce moves 2 (M - 1) payloads.
    cfg, run = make_config(
        {
            "method": "adloco",
            "initial_trainers": 2,
            "batch_test": "augmented_inner_product",
            "stats_reduce": mode,
            "max_rounds": 3,
        },
    )
    engine = make_engine(cfg, run, array_data, tmp_path)
    rows = engine.run()
    d = engine.num_params
    stats_payload = 7 * 8 if mode == "scalars" else d * 4 + 8 * 8
    for row in rows:
        assert row["sync"]["allreduce_payload_bytes"] == [d * 4, stats_payload]
        assert row["bytes"] == 2 * (row["nodes"] - 1) * (d * 4 + stats_payload)
    # The augmented test has its direction from the second round on, in both modes.
    assert rows[0]["stats"]["ip_var"] is None
    assert all(r["stats"]["ip_var"] is not None for r in rows if r["round"] > 1)
    # DiLoCo moves the pseudo-gradient alone.
    cfg, run = make_config({"method": "diloco", "max_rounds": 1})
    row = make_engine(cfg, run, array_data, tmp_path / "diloco").run()[0]
    assert row["sync"]["allreduce_payload_bytes"] == [d * 4] and row["bytes"] == 6 * d * 4
