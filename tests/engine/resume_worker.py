"""Train one run on ArrayData in its own process (killed and restarted by test_resume)."""

from __future__ import annotations

import logging
import sys

import torch
from array_data import ArrayData, tiny_curves

from adloco.config import load_config_dict, resolve_run
from adloco.engine.loop import Engine

config_path, ckpt_dir, out_path = sys.argv[1:4]
logging.basicConfig(level=logging.INFO)
cfg = load_config_dict(config_path)
run_cfg = resolve_run(cfg, "r")
engine = Engine(
    cfg, run_cfg, 0, ArrayData(), {"sim": 3}, tiny_curves(cfg), ckpt_dir, progress=False
)
engine.run()
torch.save({t.id: t.params for t in engine.trainers}, out_path)
