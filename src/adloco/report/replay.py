"""The regime sweeps together, and ``adloco regimes``: the regime table and figures alone.

Part of ``adloco report``, which calls :func:`compute_regimes` for its
regime section, and the whole of the lighter ``adloco regimes`` command:
it reads the configuration, the runs and the calibration (no variance, no
data needed), takes devices and networks brought from elsewhere
(:mod:`adloco.report.devices`), and writes into ``--out`` only
``regimes.csv``, ``regimes.json`` (the map's crossing lines, the brought
devices and networks, what each sweep varies and what it cannot) and the
figures ``figures/regimes.png`` and ``figures/regime_map.png``. Nothing is retrained: a
GPU owner replays the default runs on a curve measured on their machine
(docs/calibration.md, "Replaying the runs on your device").

Every sweep replays the passes the runs logged and their trajectory; what
that cannot change is stated per sweep (:data:`SWEEPS`).
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass, field
from pathlib import Path

from adloco.config import ClusterConfig, Config, load_config
from adloco.io import write_json_atomic
from adloco.report.devices import (
    BroughtDevice,
    check_devices,
    load_device_file,
    parse_network,
    parse_roofline,
)
from adloco.report.figures import write_figures
from adloco.report.figures_regimes import regime_map_figure, regimes_figure
from adloco.report.inputs import RunSeed, load_runs
from adloco.report.references import load_base, load_references
from adloco.report.regime_map import Crossing, RegimeMap, crossings, regime_map
from adloco.report.regimes import (
    REGIME_COLUMNS,
    ClockModel,
    NetworkPoint,
    RegimeCell,
    calibration_record,
    clock_models,
    compared_runs,
    regime_cells,
    sweep_networks,
)
from adloco.report.settings import ReportSettings, Roles, assign_roles
from adloco.report.summary import write_csv
from adloco.report.targets import Ladder, build_ladder

log = logging.getLogger(__name__)

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

    def as_dict(self) -> dict:
        return {
            "target_perplexity": self.grid.target,
            "saturation_batches": list(self.grid.saturations),
            "own_saturation_batch": self.grid.own_saturation,
            "map_note": self.grid.note or None,
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
    """The devices and networks named on the command line."""
    runs_record = calibration_record(cal_dir, cluster.devices[0].name)
    devices = [load_device_file(Path(p), runs_record) for p in device_files or []]
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
    models += [d.model([device.name for device in cluster.devices]) for d in devices]
    swept = sweep_networks(cluster.network, settings)
    cells = regime_cells(
        runs, roles, ladder.targets, cluster, models, settings, swept + list(networks)
    )
    grid = regime_map(runs, roles, ladder.main, cluster, cal_dir, settings, swept)
    found = crossings(grid, roles, settings) if grid.cells else []
    return Regimes(models, cells, grid, found, devices, list(networks))


def regime_rows(regimes: Regimes) -> list[dict]:
    """regimes.csv: the bandwidth sweep's cells, then the map's."""
    return [c.as_dict() for c in regimes.cells + regimes.grid.cells]


def draw_regimes(regimes: Regimes, main: float | None) -> dict[str, bytes | None]:
    labels = {m.key: m.label for m in regimes.models}
    return {
        "regimes": regimes_figure(regimes.cells, main, labels),
        "regime_map": regime_map_figure(regimes.grid, regimes.crossings),
    }


def run(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    settings = ReportSettings.from_section(config.report)
    runs = load_runs(Path(args.runs), config)
    cal_dir = Path(args.calibration)
    roles = assign_roles(config.report, {r.run: r.settings for r in runs})
    references = load_references(Path(args.data) if args.data else None)
    base = load_base(Path(args.base) if args.base else None)
    ladder = build_ladder(runs, roles, settings, base, references)
    devices, networks = bring(config.cluster, cal_dir, args.device, args.roofline, args.network)
    regimes = compute_regimes(runs, roles, ladder, config, cal_dir, settings, devices, networks)
    out = Path(args.out)
    write_csv(out / "regimes.csv", REGIME_COLUMNS, regime_rows(regimes))
    write_json_atomic(out / "regimes.json", regimes.as_dict())
    write_figures(out / "figures", draw_regimes(regimes, ladder.main))
    own_bw = float(config.cluster.network.bandwidth_gbit_s)
    for c in regimes.cells:
        brought = c.clock.startswith("device:") and (c.network or c.bandwidth_gbit_s == own_bw)
        if brought and c.target == ladder.main and c.against == "diloco":
            log.info(
                "%s, %s, %s: AdLoCo / DiLoCo %.3g, claim 1 %s",
                c.clock.removeprefix("device:"), c.network or f"{c.bandwidth_gbit_s:g} Gbit/s",
                c.sharing, c.effect.estimate, c.verdict,
            )  # fmt: skip
    log.info("wrote %s", out / "regimes.csv")
    return 0
