"""Read the scalars of TensorBoard event files, record by record, without TensorBoard."""

from __future__ import annotations

import struct
from pathlib import Path

from tensorboardX.proto import event_pb2


def read_events(path: Path) -> list[event_pb2.Event]:
    """Every event of one file: TFRecord frames (length, its crc, data, its crc)."""
    data, events, at = path.read_bytes(), [], 0
    while at < len(data):
        (length,) = struct.unpack_from("<Q", data, at)
        start = at + 8 + 4
        events.append(event_pb2.Event.FromString(data[start : start + length]))
        at = start + length + 4
    return events


def read_scalars(
    folder: Path, pattern: str = "events.out.tfevents.*"
) -> dict[str, list[tuple[int, float]]]:
    """{tag: [(step, value), ...]} of the one event file of ``folder`` matching ``pattern``."""
    (path,) = sorted(folder.glob(pattern))
    scalars: dict[str, list[tuple[int, float]]] = {}
    for event in read_events(path):
        for value in event.summary.value:
            scalars.setdefault(value.tag, []).append((event.step, value.simple_value))
    return scalars
