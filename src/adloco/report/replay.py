"""The regime sweeps together, and ``adloco regimes``: the regime table and figures alone.

Part of ``adloco report``, which calls :func:`compute_regimes` for its
regime section, and the whole of the lighter ``adloco regimes`` command:
it reads the configuration, the runs and the calibration (no variance, no
data needed), takes devices and networks brought from elsewhere
(:mod:`adloco.report.devices`), and writes the folder ``--out``:
``regimes.csv``, ``regimes.json`` (the map's crossing lines, the brought
devices and networks, what each sweep varies and what it cannot) and the
figures ``figures/regimes.png`` and ``figures/regime_map.png``. Nothing is retrained: a
GPU owner replays the default runs on a curve measured on their machine
(docs/calibration.md, "Replaying the runs on your device").

``--out`` is a folder of its own, written beside and swapped in whole
(:func:`adloco.core.io.atomic_dir`): a failure or a kill part-way leaves the
previous files together, never some of a new replay beside some of an old
one. A folder another stage wrote is refused before any work, and so is one
that is, or is inside, a report folder (:func:`check_not_in_report`): the
report's ``regimes.csv`` would disagree with its page.

Every sweep replays the passes the runs logged and their trajectory; what
that cannot change is stated per sweep (:data:`SWEEPS`).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path

from adloco.config import ClusterConfig, Config, load_config
from adloco.core.io import OWNED_LIST, atomic_dir, check_replaceable, write_json_atomic
from adloco.core.paths import base_summary_file, device_calibration_file
from adloco.report.claims import Comparison, fmt, tokens_to_target
from adloco.report.devices import (
    MODEL_KEYS,
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
    bandwidth_text,
    calibration_record,
    clock_models,
    clock_source,
    compared_runs,
    regime_cells,
    sweep_networks,
)
from adloco.report.settings import ReportSettings, Roles, assign_roles
from adloco.report.summary import write_csv
from adloco.report.targets import Ladder, build_ladder

log = logging.getLogger(__name__)

# The writer named in --out's manifest (adloco.core.io.check_replaceable).
WRITER = "adloco regimes"
# What adloco report writes into its folder, and the writer its manifest names.
REPORT_SIGNS = ("index.html", "claims.json")
REPORT_WRITER = "adloco report"

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
    models += [d.model([device.name for device in cluster.devices]) for d in devices]
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


def draw_regimes(regimes: Regimes, main: float | None) -> dict[str, bytes | None]:
    labels = {m.key: m.label for m in regimes.models}
    return {
        "regimes": regimes_figure(regimes.cells, main, labels),
        "regime_map": regime_map_figure(regimes.grid, regimes.crossings),
    }


def base_folder(args: argparse.Namespace, settings: ReportSettings) -> Path | None:
    """``--base``; else, for targets relative to the base model, the base beside ``--runs``.

    An experiment's folders sit side by side (``paths.runs_dir`` and
    ``paths.base_dir``: ``results/<experiment>/runs`` and ``.../base``), which
    is where Snakemake finds the base for ``adloco report``.
    """
    if args.base:
        return Path(args.base)
    if settings.targets.relative_to != "base":
        return None
    folder = Path(args.runs).parent / "base"
    if not base_summary_file(folder).is_file():
        raise ValueError(
            "report.targets.relative_to: base needs the base model's perplexity, and "
            f"{base_summary_file(folder)} (beside --runs) is not there; pass --base the base "
            "model's folder (results/<experiment>/base), or run `adloco pretrain` first"
        )
    log.info("base model: %s (beside --runs)", folder)
    return folder


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


def _written_by(folder: Path) -> str | None:
    """The writer ``folder``'s manifest names, if it reads as one."""
    try:
        manifest = json.loads((folder / OWNED_LIST).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return manifest.get("written_by") if isinstance(manifest, dict) else None


def report_folder_of(out: Path) -> Path | None:
    """The report folder that ``out`` is or is inside, if any.

    A report folder holds the page and its claims (:data:`REPORT_SIGNS`), or
    a manifest naming ``adloco report`` as its writer.
    """
    for folder in (out, *out.parents):
        signs = all((folder / name).is_file() for name in REPORT_SIGNS)
        if signs or _written_by(folder) == REPORT_WRITER:
            return folder
    return None


def check_not_in_report(out: Path) -> None:
    """Refuse an ``--out`` that is, or is inside, a folder ``adloco report`` wrote.

    The report's ``regimes.csv`` and ``regimes.json`` are those of its page;
    a replay written over them would make the table disagree with the page
    that quotes it, and a folder added inside would be a file the report did
    not write. The brought devices go onto the page by ``adloco report``'s
    own ``--device``, ``--roofline`` and ``--network``.
    """
    folder = report_folder_of(out.resolve())
    if folder is None:
        return
    where = "is" if folder == out.resolve() else f"is inside {folder},"
    raise ValueError(
        f"--out {out}: {where} a report folder adloco report wrote (index.html, "
        "claims.json), whose regimes.csv must stay the one its page shows; write the replay "
        "to a folder of its own (results/<experiment>/replay/<name>), or run adloco report "
        "with the same --device, --roofline and --network to put them on the page"
    )


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    check_not_in_report(out)  # before any work
    check_replaceable(out, WRITER, "--out")
    config = load_config(args.config)
    settings = ReportSettings.from_section(config.report)
    runs = load_runs(Path(args.runs), config)
    cal_dir = Path(args.calibration)
    roles = assign_roles(config.report, {r.run: r.settings for r in runs})
    data = Path(args.data) if args.data else None
    references = load_references(data)
    base = load_base(base_folder(args, settings), data)
    ladder = build_ladder(runs, roles, settings, base, references)
    devices, networks = bring(config.cluster, cal_dir, args.device, args.roofline, args.network)
    regimes = compute_regimes(runs, roles, ladder, config, cal_dir, settings, devices, networks)
    drawn = draw_regimes(regimes, ladder.main)
    # All or nothing: a new folder written beside --out and swapped in whole.
    with atomic_dir(out, WRITER, "--out") as tmp:
        write_csv(tmp / "regimes.csv", REGIME_COLUMNS, regime_rows(regimes))
        write_json_atomic(tmp / "regimes.json", regimes.as_dict())
        write_figures(tmp / "figures", drawn)
    log.info("wrote %s", out / "regimes.csv")
    print("\n".join(verdict_lines(regimes, ladder, config.cluster)))
    return 0
