"""Train one run on ArrayData in its own process (killed and restarted by test_resume)."""

from __future__ import annotations

import logging
import sys

import torch
from array_data import ArrayData, new_engine

from adloco.config import load_config

config_path, ckpt_dir, out_path = sys.argv[1:4]
logging.basicConfig(level=logging.INFO)
cfg = load_config(config_path)
engine = new_engine(cfg, cfg.run("r"), ArrayData(), ckpt_dir, batches={"sim": 3})
engine.run()
torch.save({t.id: t.params for t in engine.trainers}, out_path)
