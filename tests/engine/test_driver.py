"""The driver (``Driver``: start or resume, checkpoints, the run's end, export) on a tiny
model."""

from __future__ import annotations

from array_data import make_engine, new_engine


def test_checkpoint_of_another_configuration_is_set_aside(array_data, make_config, tmp_path):
    cfg_a, run_a = make_config({"method": "diloco", "max_rounds": 2})
    make_engine(cfg_a, run_a, array_data, tmp_path).run()
    cfg_b, run_b = make_config({"method": "diloco", "max_rounds": 2, "inner_lr": 0.02})
    rows_b = make_engine(cfg_b, run_b, array_data, tmp_path).run()
    # The stale checkpoint moved beside the folder; run B started from round 1.
    assert (tmp_path / "ckpt.stale" / "checkpoint.json").exists()
    assert [r["round"] for r in rows_b] == [1, 2]
    fresh = make_engine(cfg_b, run_b, array_data, tmp_path / "fresh").run()
    strip = [{k: v for k, v in r.items() if k != "wall_time_s"} for r in rows_b]
    assert strip == [{k: v for k, v in r.items() if k != "wall_time_s"} for r in fresh]


def test_every_run_of_the_default_config_ends_at_the_same_budget(array_data, tmp_path):
    # The default's runs, as configured, on the tiny model and data with a small budget.
    from pathlib import Path

    from array_data import TINY_MODEL

    from adloco.config import config_from_dict, read_yaml

    raw = read_yaml(Path(__file__).parents[2] / "config" / "config.yaml")
    raw["model"].update(TINY_MODEL)
    raw["data"]["seq_len_tokens"] = array_data.seq_len_tokens
    raw["train"].update(max_tokens=1000, inner_steps=3, eval_sequences=8, eval_batch=8)
    cfg = config_from_dict(raw)
    budget_sequences = -(-1000 // array_data.seq_len_tokens)
    for name in cfg.runs:
        run = cfg.run(name)
        batches = {d.name: 5 for d in cfg.cluster.devices}
        rows = new_engine(cfg, run, array_data, tmp_path / name, batches=batches).run()
        assert rows[-1]["tokens_total"] == budget_sequences * array_data.seq_len_tokens, name
        assert rows[-1]["round"] < run.max_rounds, name  # ended by the budget
