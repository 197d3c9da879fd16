"""Helpers of the calibration tests: the test preset, typed, a typed device, a CPU bench."""

from __future__ import annotations

from pathlib import Path

import torch
import yaml

from adloco.calibrate.bench import Bench
from adloco.config import Config, DeviceConfig, config_from_dict, section

REPO = Path(__file__).resolve().parents[2]
TEST_CONFIG = REPO / "config" / "test.yaml"


def preset_mapping(**sections) -> dict:
    """The test preset's raw mapping, ``sections`` merged into its sections."""
    raw = yaml.safe_load(TEST_CONFIG.read_text())
    for name, fields in sections.items():
        raw[name].update(fields)
    return raw


def tiny(**sections) -> Config:
    """The test preset, typed, with 2 steps per trial, sequences of 16 tokens and ``sections``."""
    sections = {
        "calibration": {"steps_per_trial": 2, **sections.pop("calibration", {})},
        "data": {"seq_len_tokens": 16, **sections.pop("data", {})},
        **sections,
    }
    return config_from_dict(preset_mapping(**sections))


def typed_device(**fields) -> DeviceConfig:
    """A typed entry of ``cluster.devices``: ``fields``, the rest the schema's defaults."""
    return section("cluster", {"devices": [{"memory_gib": 1, **fields}]}).devices[0]


def cpu_bench(config: Config, model, vocab_size: int = 64) -> Bench:
    """A bench on the CPU around ``model``, with the config's settings and seed."""
    generator = torch.Generator()
    generator.manual_seed(config.seed)
    return Bench(
        model,
        torch.device("cpu"),
        generator,
        vocab_size,
        config.data.seq_len_tokens,
        config.train,
        config.calibration,
    )
