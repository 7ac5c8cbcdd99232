"""`soak report`, `soak compare` and `soak devices`: a run's outputs again, two runs side by
side, and what this machine's devices can report."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from soak.bmc import BmcOptions
from soak.cli.args import (
    EXIT_PASS,
    VERDICT_EXIT,
    add_design_inlet,
    positive,
    print_verdict,
    subcommand,
)
from soak.devices.base import BACKEND_NAMES
from soak.errors import ConfigError
from soak.profile import load_profile


def add_report_parser(sub: argparse._SubParsersAction) -> None:
    """`soak report RUN_DIR`."""
    report = subcommand(
        sub,
        "report",
        "rebuild summary.json, junit.xml and report.html from a run",
        "Analyse a run folder's store again and rewrite its summary.json, junit.xml and "
        "report.html: for a run whose coordinator was killed, or to judge a run with another "
        "profile. The store is only read.",
        [
            "soak report reports/node1/20261201T101500Z",
            "soak report reports/node1/20261201T101500Z --profile h100-sxm",
            "soak report reports/node1/20261201T101500Z --design-inlet 32",
        ],
    )
    report.add_argument("run_dir", type=Path, help="the run folder (holding soak.sqlite)")
    report.add_argument(
        "--profile",
        metavar="FILE|NAME",
        help="judge with another profile than the run's own (default: the run's own)",
    )
    add_design_inlet(report)
    report.set_defaults(handler=report_command)


def add_compare_parser(sub: argparse._SubParsersAction) -> None:
    """`soak compare RUN_A RUN_B`."""
    compare = subcommand(
        sub,
        "compare",
        "compare two runs of the same server",
        "Print, per device, the change in steady clocks, temperatures, power and throughput "
        "between two runs and whether each is larger than the runs' own noise, and write the "
        "same as compare.html.",
        [
            "soak compare reports/n1/before reports/n1/after",
            "soak compare before/summary.json after/summary.json --out cmp.html",
        ],
    )
    compare.add_argument("run_a", type=Path, help="run folder (or its summary.json): before")
    compare.add_argument("run_b", type=Path, help="run folder (or its summary.json): after")
    compare.add_argument(
        "--out", type=Path, metavar="FILE", help="comparison report (default RUN_B/compare.html)"
    )
    compare.add_argument(
        "--min-change",
        type=positive("--min-change", allow_zero=True),
        default=1.0,
        metavar="PCT",
        help="flag a change only if it is at least this share of run A's figure, in %% "
        "(default 1), as well as beyond the noise",
    )
    compare.add_argument(
        "--anyway",
        action="store_true",
        help="compare runs of different backends or device models all the same, and say so "
        "in the headline (default: refused, exit 2: their figures do not compare)",
    )
    compare.set_defaults(handler=compare_command)


def add_devices_parser(sub: argparse._SubParsersAction) -> None:
    """`soak devices`."""
    devices = subcommand(
        sub,
        "devices",
        "list devices and their capability table",
        "Open the backend, list its devices (name, UUID, bus id, power limit) and what each "
        "can report (supported, not supported, no permission, function missing), then exit.",
        ["soak devices", "soak devices --backend sim --sim-gpus 4"],
    )
    devices.add_argument(
        "--backend",
        default="auto",
        help=f"telemetry backend: {', '.join(BACKEND_NAMES)} (default auto)",
    )
    devices.add_argument(
        "--sim-gpus",
        type=positive("--sim-gpus", int),
        default=8,
        metavar="N",
        help="simulated devices, with --backend sim (default 8)",
    )
    devices.add_argument(
        "--sim-sku",
        default="h100-sxm",
        metavar="NAME",
        help="simulated SKU, with --backend sim (default h100-sxm)",
    )
    devices.set_defaults(handler=devices_command)


RUNS_LISTED = 5  # the latest runs a folder of runs names


def runs_below(folder: Path) -> str | None:
    """For a folder that holds run folders rather than being one (``reports/node1``, or
    ``reports``): the one line that names the runs in it, the latest last; None where it
    holds a store itself or no run at all."""
    from soak.store import STORE_NAME

    if not folder.is_dir() or (folder / STORE_NAME).exists():
        return None
    stores = sorted(
        {*folder.glob(f"*/{STORE_NAME}"), *folder.glob(f"*/*/{STORE_NAME}")},
        key=lambda p: (p.parent.name, str(p)),  # a run folder is named by its UTC start
    )
    if not stores:
        return None
    runs = [str(p.parent) for p in stores]
    shown = ", ".join(runs[-RUNS_LISTED:])
    more = f" (and {len(runs) - RUNS_LISTED} earlier)" if len(runs) > RUNS_LISTED else ""
    return (
        f"{folder}: a folder of {len(runs)} run{'s' if len(runs) != 1 else ''}, not a run "
        f"folder; report one of them: {shown}{more}"
    )


def report_command(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from soak.pipeline import build_outputs

    listing = runs_below(args.run_dir)
    if listing is not None:
        raise ConfigError(listing)
    profile = load_profile(args.profile) if args.profile else None
    analysis, report = build_outputs(args.run_dir, profile, args.design_inlet)
    print_verdict(analysis)
    print(report)
    return VERDICT_EXIT[analysis.verdict]


def compare_command(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from soak.report import compare

    comparison = compare.compare_runs(
        args.run_a, args.run_b, args.min_change / 100, anyway=args.anyway
    )
    out = compare.write_comparison(comparison, args.out or compare.default_output(args.run_b))
    print(f"A: {comparison.a.label}  ({comparison.a.path})")
    print(f"B: {comparison.b.label}  ({comparison.b.path})")
    for note in comparison.notes:
        print(f"note: {note}")
    print(compare.table(comparison))
    print(f"compare: {compare.headline(comparison)}")
    print(out)
    return EXIT_PASS


def devices_command(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from soak.devices import BackendOptions, open_backend

    backend = open_backend(
        args.backend, BackendOptions(sim_gpus=args.sim_gpus, sim_sku=args.sim_sku)
    )
    try:
        infos = backend.devices()
        caps = backend.capabilities()
        from soak.runner import open_server_sensors

        sensors = open_server_sensors(BmcOptions(), backend)
        sensors.close()
    finally:
        backend.close()
    print(f"backend: {backend.name}, {len(infos)} device(s)")
    for info in infos:
        limit = f"{info.power_limit_w:.0f} W" if info.power_limit_w is not None else "n/a"
        ids = f"uuid={info.uuid or 'n/a'}  bus={info.pci_bus_id or 'n/a'}"
        print(f"  {info.index}: {info.name}  {ids}  power limit {limit}")
    metrics = sorted({m for table in caps.values() for m in table})
    if metrics:
        width = max(len(m) for m in metrics)
        print("\ncapabilities:")
        print(f"  {'metric':<{width}}  " + "  ".join(f"{i:>16}" for i in caps))
        for metric in metrics:
            cells = "  ".join(f"{caps[i].get(metric, '-')!s:>16}" for i in caps)
            print(f"  {metric:<{width}}  {cells}")
    probe = sensors.probe
    detail = f"{probe.inlet_sensor!r} from {probe.source}" if sensors.available else probe.reason
    print(f"\ninlet temperature (server, from the BMC): {probe.capability} ({detail})")
    return EXIT_PASS
