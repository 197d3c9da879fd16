"""The step-time model: the curve a device's simulated clock charges, from its ``step_time`` block.

Part of ``adloco calibrate`` (:mod:`adloco.calibrate`). ``measured``: the
curve timed on this machine (:mod:`adloco.calibrate.step_timing`) times
``scale``; ``roofline``: flat up to ``saturation_batch`` sequences, then linear
at ``speed_tflops``; ``measured_record``: the curve another device's record
holds (``step_time.record``), mapped to this sequence length at equal tokens
per pass (:func:`adloco.formats.clock.at_equal_tokens`). The formulas are in
``docs/calibration.md``.
"""

from __future__ import annotations

from typing import Any

from adloco.config import DeviceConfig, thaw
from adloco.formats.calibration import measured_record, step_time_record
from adloco.formats.clock import FLOPS_PER_TOKEN_PER_PARAM, StepTimeCurve, at_equal_tokens

# What the step_time record repeats of a measured_record's source: where it was measured.
SOURCE_FIELDS = ("gpu_name", "torch_version", "dtype", "model_parameters", "provenance")


def roofline_seconds_per_sequence(num_params: int, seq_len_tokens: int, tflops: float) -> float:
    """6 · parameters · seq_len_tokens FLOPs of one sequence's pass at ``tflops``."""
    return FLOPS_PER_TOKEN_PER_PARAM * num_params * seq_len_tokens / (tflops * 1e12)


def declared_step_time(
    device: DeviceConfig, num_params: int, seq_len_tokens: int, measured: StepTimeCurve
) -> tuple[dict[str, Any], StepTimeCurve]:
    """The ``step_time`` record of a device and the curve its clock uses.

    ``measured``: this machine's curve times ``scale``. ``roofline``: flat at
    ``saturation_batch`` sequences' worth of compute up to ``saturation_batch``,
    then linear at ``speed_tflops``, with ``update_s`` per update.
    ``measured_record``: the record's curve at equal tokens per pass, its
    measured update; the record's curve, sequence length and origin are
    written beside (``record_curve``, ``record_seq_len_tokens``, ``source``).
    """
    step_time = device.step_time
    tflops = float(device.speed_tflops)
    record = {**thaw(step_time), "speed_tflops": tflops}
    if step_time.model == "measured":
        return record, measured.scaled(step_time.scale)
    if step_time.model == "measured_record":
        source = measured_record(str(step_time.record))
        record.update(step_time_record(device))
        record["source"] = {k: source.fields[k] for k in SOURCE_FIELDS if k in source.fields}
        curve = at_equal_tokens(source.curve(), source.fields["seq_len_tokens"], seq_len_tokens)
        return record, curve
    per_sequence = roofline_seconds_per_sequence(num_params, seq_len_tokens, tflops)
    record.update(
        seconds_per_sequence=per_sequence,
        flops_per_sequence=FLOPS_PER_TOKEN_PER_PARAM * num_params * seq_len_tokens,
    )
    curve = StepTimeCurve.roofline(per_sequence, step_time.saturation_batch, step_time.update_s)
    return record, curve
