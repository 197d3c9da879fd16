"""The ``cluster`` section: the devices, their node slots and the network.

Each field is declared once with :func:`~adloco.config.fields.setting` (its
schema, default and description); derived values (the cluster's node slots,
a device by name, the cluster a run trains on) are methods beside them.
"""

from __future__ import annotations

import dataclasses

from adloco.config.fields import REQUIRED, setting
from adloco.config.runs import RunSettings
from adloco.config.schema import ConfigError
from adloco.formats.calibration import measured_record


@dataclasses.dataclass(frozen=True)
class StepTimeConfig:
    """``cluster.devices[].step_time``: how a device's step time is modelled."""

    model: str = setting(
        "roofline",
        (
            "measured: the curve `adloco calibrate` timed on this machine, times scale; "
            "roofline: flat up to saturation_batch sequences, then linear at speed_tflops; "
            "measured_record: the curve of another device's calibration record (record), "
            "mapped at equal tokens per pass"
        ),
        type="string",
        enum=["measured", "roofline", "measured_record"],
    )
    record: str | None = setting(
        None,
        (
            "measured_record: a calibration record with a step_time_curve and its "
            "seq_len_tokens (config/devices/*.json, or a file `adloco calibrate` wrote on a "
            "GPU), relative to the working folder"
        ),
        type=["string", "null"],
        minLength=1,
    )
    saturation_batch: int = setting(
        8,
        "roofline: sequences per pass from which the device is compute-bound",
        type="integer",
        minimum=1,
    )
    update_s: float = setting(
        0.0, "roofline: seconds of one optimizer update", type="number", minimum=0
    )
    scale: float = setting(
        1.0,
        ("measured: factor on the measured times (target device's step time / this machine's)"),
        type="number",
        exclusiveMinimum=0,
    )


@dataclasses.dataclass(frozen=True)
class DeviceConfig:
    """One entry of ``cluster.devices``: ``count`` identical devices."""

    name: str = setting(
        REQUIRED, "device id", type="string", pattern="^[A-Za-z0-9][A-Za-z0-9._-]*$"
    )
    count: int = setting(1, "devices of this kind", type="integer", minimum=1)
    kind: str = setting("cpu", "cpu simulated or cuda real", type="string", enum=["cpu", "cuda"])
    memory_gib: float = setting(REQUIRED, "memory of one device", type="number", exclusiveMinimum=0)
    speed_tflops: float = setting(
        1.0,
        (
            "sustained compute at saturation of a roofline step_time (6 x parameters x tokens"
            " FLOPs per sequence)"
        ),
        type="number",
        exclusiveMinimum=0,
    )
    max_batch: int | None = setting(
        None, "fixed max batch instead of calibration", type=["integer", "null"], minimum=1
    )
    gpu_model: str | None = setting(
        None,
        ("SLURM GPU type for jobs on this device (cuda only; default: $ADLOCO_GPU_MODEL)"),
        type=["string", "null"],
    )
    step_time: StepTimeConfig = setting(
        {}, ("what the simulated clock charges for one step on this device (docs/calibration.md)")
    )

    def check_step_time(self, key: str) -> None:
        """A ``measured_record`` device names a readable record with a curve and its length.

        ``key``: the device's key (``cluster.devices.<i>``) for the message.
        Checked at load, so that a wrong path fails before any job starts.
        """
        if self.step_time.model != "measured_record":
            return
        path = self.step_time.record
        if path is None:
            raise ConfigError(
                f"{key}.step_time.record: required when step_time.model is measured_record "
                "(the calibration record whose curve the clock maps)"
            )
        try:
            measured_record(path)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{key}.step_time.record: {exc}") from None


@dataclasses.dataclass(frozen=True)
class NetworkConfig:
    """``cluster.network``: the link between node slots."""

    bandwidth_gbit_s: float = setting(1.0, "link bandwidth", type="number", exclusiveMinimum=0)
    latency_s: float = setting(0.001, "per-message latency", type="number", minimum=0)


@dataclasses.dataclass(frozen=True)
class ClusterConfig:
    """``cluster``: the devices, their node slots and the network."""

    nodes_per_device: int = setting(1, "node slots per device", type="integer", minimum=1)
    slot_sharing: str = setting(
        "concurrent",
        (
            "how the slots of one device share it (docs/calibration.md). concurrent: the "
            "slots step at the same time, each may peak with the others (memory budget M / "
            "k), and the clock runs their i-th micro-batches as one pass of the summed size; "
            "time_slicing: the slots take turns (budget M - (k - 1) x 3 x parameter bytes) "
            "and the clock charges their passes one after another"
        ),
        type="string",
        enum=["concurrent", "time_slicing"],
    )
    processes_per_machine: int = setting(
        1,
        (
            "training processes on the job's machine (torchrun --nproc_per_node); 1: one "
            "process runs every slot"
        ),
        type="integer",
        minimum=1,
    )
    devices: tuple[DeviceConfig, ...] = setting(REQUIRED, type="array", minItems=1)
    network: NetworkConfig = setting({})

    def device_count(self) -> int:
        """Devices of the cluster, every entry's ``count`` summed."""
        return sum(d.count for d in self.devices)

    def for_run(self, run: RunSettings) -> ClusterConfig:
        """The cluster a run trains on: its own nodes_per_device where it sets one."""
        if run.nodes_per_device is None:
            return self
        return dataclasses.replace(self, nodes_per_device=run.nodes_per_device)

    def slots(self) -> int:
        """Node slots of the cluster: devices x nodes_per_device."""
        return self.device_count() * self.nodes_per_device

    def device(self, name: str) -> DeviceConfig:
        """The entry of ``devices`` called ``name``."""
        for device in self.devices:
            if device.name == name:
                return device
        known = ", ".join(d.name for d in self.devices)
        raise ConfigError(f"cluster.devices: no device named {name} (devices: {known})")

    def per_device(self) -> list[DeviceConfig]:
        """One entry per device (an entry of count n n times), in order."""
        return [device for device in self.devices for _ in range(device.count)]
