"""The registry of batch tests and the next batch it sets (adloco.algo.batch_tests)."""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys

import pytest
from batch_cases import KW, est_of, next_batch

from adloco.algo import batch_tests
from adloco.config import RunSettings
from adloco.config.runs import BATCH_TESTS


def test_norm_test_hand_values():
    # B = 8 / (0.64 * 0.5) = 25; from a global batch of 8 the cap is floor(8 * 4) = 32.
    batch, b_global = next_batch("norm", est_of(), current_batch=8, **KW)
    assert b_global == pytest.approx(25.0)
    assert batch == 25
    # Growth cap: floor(8 * 2.5) = 20.
    batch, _ = next_batch("norm", est_of(), 8, **{**KW, "max_growth": 2.5})
    assert batch == 20
    # Above what the test asks: unchanged.
    assert next_batch("norm", est_of(), 30, **KW) == (30, pytest.approx(25.0))


def test_batch_never_decreases_and_unchanged_cases():
    small = est_of(trace_cov=0.01)
    assert next_batch("norm", small, 16, **KW)[0] == 16
    assert next_batch("norm", None, 16, **KW) == (16, None)
    assert next_batch("none", est_of(), 3, **KW) == (3, None)
    assert next_batch("norm", est_of(bgs=1e-13), 3, **KW) == (3, None)
    # Augmented test without a reference direction cannot say anything.
    assert next_batch("augmented_inner_product", est_of(), 3, **KW) == (3, None)
    assert next_batch("norm", est_of(trace_cov=math.nan), 3, **KW) == (3, None)
    for current in range(1, 50):
        for trace in (0.0, 0.3, 5.0, 80.0, 1e6):
            local, _ = next_batch("norm", est_of(trace_cov=trace), current, **KW)
            assert current <= local <= math.floor(current * KW["max_growth"])
    with pytest.raises(ValueError, match="unknown batch test"):
        next_batch("inner", est_of(), 3, **KW)


def test_registry_names_settings_and_flags():
    # TESTS, the registry's names, "none" first, are the configuration's BATCH_TESTS
    # (the schema's batch_test enum): a test added to one and not the other fails here.
    assert batch_tests.TESTS == ("none", "norm", "augmented_inner_product", "inner_product")
    assert batch_tests.TESTS == BATCH_TESTS
    assert [t.name for t in batch_tests.REGISTRY.values()] == list(batch_tests.TESTS)
    flags = {n: (t.adaptive, t.needs_reference) for n, t in batch_tests.REGISTRY.items()}
    assert flags == {
        "none": (False, False),
        "norm": (True, False),
        "augmented_inner_product": (True, True),
        "inner_product": (True, True),
    }
    values = {"eta": 0.8, "vartheta": 0.01, "nu": 0.3, "inner_lr": 1e-3}
    read = {n: dataclasses.asdict(t.settings_from(values)) for n, t in batch_tests.REGISTRY.items()}
    assert read == {
        "none": {},
        "norm": {"eta": 0.8},
        "augmented_inner_product": {"vartheta": 0.01, "nu": 0.3},
        "inner_product": {"vartheta": 0.01},
    }
    with pytest.raises(ValueError, match="expected one of none, norm, augmented_inner_product"):
        batch_tests.get("Norm")
    with pytest.raises(ValueError, match="nu must be > 0"):
        next_batch("augmented_inner_product", est_of(), 3, **{**KW, "nu": 0.0})


def test_settings_of_every_test_are_run_settings_fields():
    fields = {f.name: f.type for f in dataclasses.fields(RunSettings)}
    for test in batch_tests.REGISTRY.values():
        for f in dataclasses.fields(test.settings_type):
            assert fields.get(f.name) == "float", (test.name, f.name)


def test_registry_imports_without_torch():
    code = (
        "import sys; from adloco.algo import batch_tests; "
        "assert 'torch' not in sys.modules; print(','.join(batch_tests.TESTS))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "none,norm,augmented_inner_product,inner_product"
