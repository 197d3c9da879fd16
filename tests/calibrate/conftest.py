"""Fixtures of the calibration tests: the test preset's tiny configuration and model."""

from __future__ import annotations

import pytest
from calibrate_helpers import tiny

from adloco.model.llama import build_model


@pytest.fixture(scope="module")
def tiny_config():
    return tiny()


@pytest.fixture(scope="module")
def tiny_model(tiny_config):
    return build_model(tiny_config.model, 64, tiny_config.data.seq_len_tokens, seed=0)
