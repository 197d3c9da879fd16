"""The regime sweeps together: what ``adloco report`` and ``adloco regimes`` replay.

The bandwidth sweep under each clock model (the runs' own curve, linear in
tokens, this machine's measured one and the devices brought from elsewhere,
:mod:`adloco.report.inputs.devices`), the networks brought, and the regime map
with its crossing lines (:mod:`adloco.report.analysis.regime_map`). Nothing is
retrained: every sweep replays the passes the runs logged and their
trajectory; what that cannot change is stated per sweep (:data:`SWEEPS`).
:func:`verdict_lines` words claim 1 at the main target on each brought device
and network as the report does, for ``adloco regimes`` to print.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from adloco.config import ClusterConfig, Config
from adloco.core.paths import device_calibration_file
from adloco.report.analysis.claims import Comparison, fmt, tokens_to_target
from adloco.report.analysis.regime_map import Crossing, RegimeMap, crossings, regime_map
from adloco.report.analysis.regime_sweep import (
    ClockModel,
    RegimeCell,
    bandwidth_text,
    brought_model,
    calibration_record,
    clock_models,
    clock_source,
    compared_runs,
    regime_cells,
    sweep_networks,
)
from adloco.report.analysis.targets import Ladder
from adloco.report.inputs.devices import (
    MODEL_KEYS,
    BroughtDevice,
    NetworkPoint,
    check_devices,
    load_device_file,
    parse_network,
    parse_roofline,
)
from adloco.report.inputs.results import RunSeed
from adloco.report.settings import ReportSettings, Roles

# What cannot be replayed, whatever the sweep: the runs' passes and trajectory.
HELD = (
    "memory: the passes are those the runs' max batch allowed (a device with more memory "
    "would have run larger passes, accumulated less and switched mode elsewhere); the "
    "trajectory: the batches the test asked for, the merges, the round at which each run "
    "reaches each target and every perplexity"
)

# Per sweep: what it varies, and what it holds at the runs' values.
SWEEPS = {
    "clock models × bandwidth": (
        "the step-time curve (linear in tokens, the runs' own, this machine's measured), "
        "the bandwidth and the slot-sharing policy",
        "the latency (the cluster's); " + HELD,
    ),
    "regime map": (
        "where the roofline saturates (its flat region), the bandwidth and the slot-sharing policy",
        "each device's peak rate (seconds a sequence, from the runs' curve) and update time, "
        "the latency; " + HELD,
    ),
    "brought devices": (
        "the device's step-time curve (on every device of the cluster), the network "
        "(bandwidth and latency) and the slot-sharing policy",
        "the number of devices and slots and which slots share a device; " + HELD,
    ),
}


@dataclass
class Regimes:
    """Every regime sweep of one report."""

    models: list[ClockModel]
    cells: list[RegimeCell]
    grid: RegimeMap
    crossings: list[Crossing]
    devices: list[BroughtDevice] = field(default_factory=list)
    networks: list[NetworkPoint] = field(default_factory=list)  # brought
    clock_source: str = ""  # the device the runs' clock comes from, in words (clock_source)
    tokens: Comparison | None = None  # claim 1 in tokens to the main target: no clock in it

    def as_dict(self) -> dict:
        return {
            "target_perplexity": self.grid.target,
            "saturation_batches": list(self.grid.saturations),
            "own_saturation_batch": self.grid.own_saturation,
            "map_note": self.grid.note or None,
            "clock_source": self.clock_source or None,
            "crossings": [c.as_dict() for c in self.crossings],
            "devices": [{"name": d.name, "source": d.source} for d in self.devices],
            "networks": [
                {"name": n.name, "bandwidth_gbit_s": n.bandwidth_gbit_s, "latency_s": n.latency_s}
                for n in self.networks
            ],
            "sweeps": {k: {"varies": v, "cannot_vary": h} for k, (v, h) in SWEEPS.items()},
        }


def bring(
    cluster: ClusterConfig,
    cal_dir: Path,
    device_files: list[str] | None = None,
    rooflines: list[str] | None = None,
    network_specs: list[str] | None = None,
) -> tuple[list[BroughtDevice], list[NetworkPoint]]:
    """The devices and networks named on the command line.

    A device file is checked against the runs' model, which their own
    calibration file names (``model_parameters``, ``seq_len_tokens``).
    """
    name = cluster.devices[0].name
    runs_record = calibration_record(cal_dir, name)
    runs_model = {k: runs_record.get(k) if runs_record else None for k in MODEL_KEYS}
    if device_files and runs_model["model_parameters"] is None:
        raise ValueError(
            f"{device_calibration_file(cal_dir, name)}: missing or without model_parameters, "
            "so no device file can be checked against the runs' model; pass --calibration the "
            "runs' calibration folder (results/<experiment>/calibration)"
        )
    devices = [load_device_file(Path(p), runs_model) for p in device_files or []]
    devices += [parse_roofline(s) for s in rooflines or []]
    names = [d.name for d in devices]
    if len(set(names)) != len(names):
        raise ValueError(f"two brought devices share a name: {', '.join(names)}")
    return devices, [parse_network(s) for s in network_specs or []]


def compute_regimes(
    runs: list[RunSeed],
    roles: Roles,
    ladder: Ladder,
    config: Config,
    cal_dir: Path,
    settings: ReportSettings,
    devices: list[BroughtDevice] | None = None,
    networks: list[NetworkPoint] | None = None,
) -> Regimes:
    """The bandwidth sweep (with brought devices and networks) and the regime map."""
    devices, networks = devices or [], networks or []
    check_devices(devices, runs, compared_runs(roles))
    models = clock_models(config, cal_dir)
    cluster = config.cluster
    models += [brought_model(d, [device.name for device in cluster.devices]) for d in devices]
    swept = sweep_networks(cluster.network, settings)
    cells = regime_cells(
        runs, roles, ladder.targets, cluster, models, settings, swept + list(networks), ladder
    )
    grid = regime_map(runs, roles, ladder.main, cluster, cal_dir, settings, swept)
    found = crossings(grid, roles, settings) if grid.cells else []
    return Regimes(
        models, cells, grid, found, devices, list(networks),
        clock_source(config, cal_dir), tokens_to_target(runs, roles, ladder, settings),
    )  # fmt: skip


def regime_rows(regimes: Regimes) -> list[dict]:
    """regimes.csv: the bandwidth sweep's cells, then the map's."""
    return [c.as_dict() for c in regimes.cells + regimes.grid.cells]


AGAINST_WORDS = {"diloco": "DiLoCo", "best": "the best baseline"}


def verdict_lines(regimes: Regimes, ladder: Ladder, cluster: ClusterConfig) -> list[str]:
    """Claim 1 at the main target, as the report words it, on each brought device and network.

    Each brought device (else the runs' own curve) on the cluster's network
    and on each brought one, with the cluster's slot sharing, against DiLoCo
    and the best baseline: the verdict, then its reason (the ratio, its
    interval and p; a run that never gets there said so).
    """
    own_bw, own_latency = float(cluster.network.bandwidth_gbit_s), float(cluster.network.latency_s)
    clocks = [f"device:{d.name}" for d in regimes.devices] or ["run"]

    def shown(c: RegimeCell) -> bool:
        on_own = math.isclose(c.bandwidth_gbit_s, own_bw, rel_tol=1e-9) and math.isclose(
            c.latency_s or 0.0, own_latency, rel_tol=1e-9
        )
        return (
            c.target == ladder.main and c.clock in clocks and c.against in AGAINST_WORDS
            and c.sharing == cluster.slot_sharing and (bool(c.network) or on_own)
        )  # fmt: skip

    cells = [c for c in regimes.cells if shown(c)]
    if not cells:
        why = ladder.note if ladder.main is None else "no AdLoCo, DiLoCo or clock curves to replay"
        return [f"No replay at the main target: {why}."]
    lines = [
        f"Target: perplexity {fmt(ladder.main)}, the main target ({ladder.note}).",
        "Claim 1, AdLoCo reaches the target in less simulated time than DiLoCo, replayed with "
        f"slots {cluster.slot_sharing.replace('_', ' ')} as the runs had them (regimes.csv: "
        "every target, policy and bandwidth):",
    ]
    if ladder.caveat:
        lines.insert(1, f"Targets unchecked against token statistics: {ladder.caveat}.")
    cells.sort(key=lambda c: (clocks.index(c.clock), bool(c.network), c.network))
    for clock, network in dict.fromkeys((c.clock, c.network) for c in cells):
        group = [c for c in cells if (c.clock, c.network) == (clock, network)]
        device = "the runs' own curve" if clock == "run" else clock.removeprefix("device:")
        where = network or "the cluster's network"
        bandwidth, latency = group[0].bandwidth_gbit_s, group[0].latency_s
        lines.append(f"{device} on {where} ({bandwidth_text(bandwidth)}, latency {latency:g} s):")
        for c in sorted(group, key=lambda c: list(AGAINST_WORDS).index(c.against)):
            reason = c.reason.removesuffix(f"; {ladder.caveat}")  # said once, above
            lines.append(
                f"  against {AGAINST_WORDS[c.against]} ({c.baseline}): {c.verdict} — {reason}"
            )
    return lines
