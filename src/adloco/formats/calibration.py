"""The calibration record: one device's ``results/<experiment>/calibration/<device>.json``.

``adloco calibrate`` (:mod:`adloco.calibrate`) writes it; training reads a
device's max micro-batch and the step-time curve its simulated clock charges
(:func:`load_max_batch`, :func:`load_step_time_curve`), after checking that
the file was measured on its model (:func:`check_calibrated_model`); the report reads its
fields, its curves and, from a file measured on another machine, its measured
curve. :class:`CalibrationRecord` is the only reader and writer of the file,
so every stage refuses a bad file the same way: an error that names the file
and the field. A field written with the wrong type is refused when the file
is read; a field a reader needs but the file lacks, when it is asked for (a
file whose ``max_batch`` is configured need not be searched, and a report
shows what a file has).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from adloco.core.io import read_json_object, write_json_atomic
from adloco.core.paths import device_calibration_file
from adloco.formats.clock import StepTimeCurve

STEP_TIME_MODELS = ("measured", "roofline", "measured_record")

NUMBER = (int, float)
# The JSON type of every field adloco calibrate writes (docs/calibration.md).
FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "device": (str,),
    "kind": (str,),
    "memory_bytes": (int,),
    "nodes_per_device": (int,),
    "slot_sharing": (str,),
    "margin": NUMBER,
    "seq_len_tokens": (int,),
    "vocab_size": (int,),
    "dtype": (str,),
    "torch_version": (str,),
    "param_bytes": (int,),
    "model_parameters": (int,),
    "gpu_name": (str,),
    "gpu_total_bytes": (int,),
    "method": (str,),
    "budget_bytes": (int, type(None)),
    "raw_max_batch": (int,),
    "max_batch": (int,),
    "max_batch_limit": (int,),
    "steps_per_trial": (int,),
    "trials": (list,),
    "step_time": (dict,),
    "step_time_measured": (dict,),
    "step_time_curve": (dict,),
    "provenance": (dict,),
}


# What the loaders read of the configuration's devices (adloco.config.DeviceConfig and
# ClusterConfig), named here: the configuration imports this module, never the reverse.
class StepTimeSettings(Protocol):
    model: str  # one of STEP_TIME_MODELS
    scale: float
    record: str | None
    saturation_batch: int
    update_s: float


class DeviceSettings(Protocol):
    name: str
    max_batch: int | None
    speed_tflops: float
    step_time: StepTimeSettings


class ClusterSettings(Protocol):
    devices: Sequence[DeviceSettings]


class CalibrationError(ValueError):
    """A calibration file that is malformed, of another device, or stale."""


def _type_name(types: tuple[type, ...]) -> str:
    names = {int: "an integer", float: "a number", str: "a string", list: "a list"}
    names |= {dict: "an object", type(None): "null"}
    return " or ".join(dict.fromkeys(names[t] for t in types))


def check_field_types(path: Path | str, fields: Mapping[str, Any]) -> None:
    """Every known field present has its JSON type (a bool is not a number)."""
    for name, types in FIELD_TYPES.items():
        if name not in fields:
            continue
        value = fields[name]
        if isinstance(value, bool) or not isinstance(value, types):
            raise CalibrationError(
                f"{path}: field {name!r} must be {_type_name(types)}, got {value!r}"
            )


# Fields every record adloco calibrate writes holds: a file without them is not one.
WRITTEN_FIELDS = ("device", "max_batch", "step_time", "step_time_curve")


def check_replaceable(path: str | Path, what: str = "--out") -> None:
    """Refuse, before any work, to replace ``path`` unless it is a record adloco calibrate wrote.

    Absent: written. A calibration record (a JSON object with the fields every
    record has, of their types): replaced, as every stage replaces its own
    output. Anything else (a file of the user's, a folder, a link, a record cut
    or edited into another shape) is refused in one line naming it, and kept.
    """
    path = Path(path)
    where = f"{what} {path}"
    if not os.path.lexists(path):
        return
    if path.is_symlink() or not path.is_file():
        kind = "a link" if path.is_symlink() else "a folder" if path.is_dir() else "not a file"
        raise CalibrationError(
            f"{where}: is {kind}, not a calibration record adloco calibrate wrote, so it is "
            "not replaced (it is kept); give the record's own path, or another --out"
        )
    try:
        fields = read_json_object(path, error=CalibrationError)
        check_field_types(path, fields)
        missing = [name for name in WRITTEN_FIELDS if name not in fields]
    except (CalibrationError, OSError):
        missing = list(WRITTEN_FIELDS)
    if missing:
        raise CalibrationError(
            f"{where}: holds a file adloco calibrate did not write (no {missing[0]} of a "
            "calibration record), which writing the record would replace; move it away, or "
            "give another --out"
        )


@dataclass(frozen=True)
class CalibrationRecord:
    """A calibration file's fields, with typed access that names the file and the field."""

    path: Path
    fields: Mapping[str, Any]

    @classmethod
    def read(
        cls, path: str | Path, device: str | None = None, missing: str | None = None
    ) -> CalibrationRecord:
        """The file at ``path``; ``device``: the device it must calibrate.

        ``missing``: the message when the file does not exist (FileNotFoundError).
        """
        path = Path(path)
        fields = read_json_object(path, missing, error=CalibrationError)
        check_field_types(path, fields)
        if device is not None and fields.get("device") != device:
            raise CalibrationError(
                f"{path}: calibrates device {fields.get('device')!r}, not {device!r}"
            )
        return cls(path, fields)

    @classmethod
    def read_if_present(
        cls, path: str | Path, device: str | None = None
    ) -> CalibrationRecord | None:
        """The file at ``path``, or None when there is none (a malformed one raises)."""
        return cls.read(path, device) if Path(path).is_file() else None

    @classmethod
    def write(cls, path: str | Path, fields: Mapping[str, Any]) -> CalibrationRecord:
        """Write ``fields`` atomically (after checking their types) and return the record."""
        path = Path(path)
        check_field_types(path, fields)
        write_json_atomic(path, dict(fields))
        return cls(path, fields)

    def get(self, name: str, default: Any = None) -> Any:
        """A field the file may lack (its type was checked on reading)."""
        return self.fields.get(name, default)

    def require(self, name: str, why: str = "") -> Any:
        """A field the reader needs: missing, it raises naming the file and the field."""
        if name not in self.fields:
            raise CalibrationError(f"{self.path}: no {name}{why}")
        return self.fields[name]

    @property
    def max_batch(self) -> int:
        value = self.fields.get("max_batch")
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise CalibrationError(f"{self.path}: max_batch missing or not a positive integer")
        return value

    def check_model(self, model_parameters: int, seq_len_tokens: int) -> None:
        """The file was measured on this model: its parameter count and sequence length.

        A file of another model (another experiment's calibration folder, say)
        has a max batch and step times that do not hold for this one.
        """
        device = self.get("device")
        fix = (
            f"re-run `adloco calibrate --device {device}` for this config, or point "
            "--calibration at this experiment's calibration folder"
        )
        for key, wanted in (
            ("seq_len_tokens", seq_len_tokens),
            ("model_parameters", model_parameters),
        ):
            recorded = self.require(key, f"; {fix}")
            if recorded != wanted:
                raise CalibrationError(
                    f"{self.path}: calibrated with {key} {recorded}, the run's model has "
                    f"{wanted}: its max batch and step times were measured on another model; {fix}"
                )

    def curve(self, name: str = "step_time_curve", why: str = "") -> StepTimeCurve:
        """``step_time_curve`` (what the runs' clock charges) or ``step_time_measured``."""
        fields = self.require(name, why)
        try:
            return StepTimeCurve.from_dict(fields)
        except (KeyError, TypeError, ValueError) as exc:
            raise CalibrationError(f"{self.path}: {name} is malformed: {exc!r}") from exc


def read_device_record(
    calibration_dir: str | Path, device: DeviceSettings, what: str
) -> CalibrationRecord:
    """A configured device's record; ``what``: how else to get one, for the missing-file error."""
    name = device.name
    path = device_calibration_file(calibration_dir, name)
    missing = (
        f"{path}: no calibration for device {name}; run `adloco calibrate --device {name} "
        f"--out {path} ...`{what}"
    )
    return CalibrationRecord.read(path, name, missing)


def check_calibrated_model(
    calibration_dir: str | Path,
    cluster: ClusterSettings,
    model_parameters: int,
    seq_len_tokens: int,
) -> None:
    """Each device's calibration file was measured on this model (its ``check_model``).

    A device without a file is left to the readers of its max batch and step
    times, which refuse it.
    """
    for device in cluster.devices:
        path = device_calibration_file(calibration_dir, device.name)
        record = CalibrationRecord.read_if_present(path, device.name)
        if record is not None:
            record.check_model(model_parameters, seq_len_tokens)


def load_max_batch(calibration_dir: str | Path, device: DeviceSettings) -> int:
    """The micro-batch cap of a device: its configured ``max_batch``, else its calibration file."""
    if device.max_batch is not None:
        return int(device.max_batch)
    why = " or set its max_batch in the config"
    return read_device_record(calibration_dir, device, why).max_batch


def measured_record(path: str | Path) -> CalibrationRecord:
    """The record a ``measured_record`` device maps: a ``step_time_curve`` and its sequence length.

    Any calibration record will do (one ``adloco calibrate`` wrote on a GPU,
    or a device file of ``config/devices/``); errors name the file.
    """
    record = CalibrationRecord.read(path, missing=f"{path}: no such file (a calibration record)")
    record.curve(why=" (a record `adloco calibrate` wrote has one)")
    seq_len = record.require("seq_len_tokens", ": the sequence length its curve was timed at")
    if seq_len < 1:
        raise CalibrationError(f"{path}: seq_len_tokens must be >= 1, got {seq_len}")
    return record


def step_time_record(device: DeviceSettings) -> dict[str, Any]:
    """What a calibration file records of a device's step-time settings, and checks against.

    ``measured``: the model and its ``scale``; ``roofline``: the model, its
    saturation batch, update time and the device's ``speed_tflops``;
    ``measured_record``: the model, the record's path, and the curve and
    sequence length read from it, so that a record edited since calibration
    is caught as a changed setting is.
    """
    step_time = device.step_time
    if step_time.model == "measured":
        return {"model": "measured", "scale": step_time.scale}
    if step_time.model == "measured_record":
        source = measured_record(str(step_time.record))
        return {
            "model": "measured_record",
            "record": step_time.record,
            "record_seq_len_tokens": source.fields["seq_len_tokens"],
            "record_curve": source.curve().as_dict(),
        }
    return {
        "model": "roofline",
        "saturation_batch": step_time.saturation_batch,
        "update_s": step_time.update_s,
        "speed_tflops": float(device.speed_tflops),
    }


def load_step_time_curve(calibration_dir: str | Path, device: DeviceSettings) -> StepTimeCurve:
    """The step-time curve the simulated clock charges on a device, from its calibration file.

    Every device has a file (a configured ``max_batch`` skips only the search).
    The file must have been written under the device's current ``step_time``
    settings (and ``speed_tflops`` for a roofline); otherwise re-run
    ``adloco calibrate``.
    """
    record = read_device_record(calibration_dir, device, "")
    curve = record.curve(why=" (written before step timing?); re-run `adloco calibrate`")
    recorded = record.get("step_time") or {}
    wanted = step_time_record(device)
    stale = {k: recorded.get(k) for k in wanted if recorded.get(k) != wanted[k]}
    if stale:
        config_says = {k: wanted[k] for k in stale}
        raise CalibrationError(
            f"{record.path}: written for step_time {stale}, the config says {config_says}; "
            f"re-run `adloco calibrate --device {device.name}`"
        )
    return curve
