"""`soak import FORMAT FILE`: one registry of formats (name, help, examples, its own
arguments and its reader) that the parser and the command loop over, so that a format is
added in one place: a module in ``soak/importers/`` and its entry in ``FORMATS``."""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from soak.cli.args import VERDICT_EXIT, Parser, positive, print_verdict, subcommand, tag


@dataclass(frozen=True)
class ImportFormat:
    """One trace format: its one-line help, examples, the arguments only it takes, and the
    reader that turns the parsed arguments into a ``Trace``."""

    summary: str
    examples: tuple[str, ...]
    add_arguments: Callable[[argparse.ArgumentParser], None]
    read: Callable[[argparse.Namespace], object]
    default_workload: str = "imported"


def _csv_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--time-col", required=True, help="column holding the time (required)")
    p.add_argument(
        "--time-unit",
        default="s",
        choices=("s", "ms", "iso"),
        help="unit of --time-col: seconds, milliseconds or ISO-8601 (default s)",
    )
    p.add_argument(
        "--device-col",
        help="column holding the device index, in a long file (default: none; "
        "without it or --devices, the file is one device, one row per time)",
    )
    p.add_argument(
        "--devices",
        type=positive("--devices", int),
        help="number of devices in a wide file; {i} in --map is the device (default: none)",
    )
    p.add_argument(
        "--map",
        action="append",
        default=[],
        metavar="FIELD=COLUMN",
        help="soak field (temp_c, mem_temp_c, sm_clock_mhz, mem_clock_mhz, power_w, "
        "power_limit_w, util_pct, mem_util_pct, fan_pct, clock_reasons (a bitmask), "
        "throughput; clock_reasons.sw_power_cap, .sw_thermal, .hw_slowdown, .hw_thermal, "
        ".hw_power_brake: one reason per column, Active/Not Active or 1/0; "
        "inlet_c: the server's inlet in °C, e.g. a logged IPMI column, for the thermal "
        "headroom) from COLUMN; repeatable; COLUMN may hold {i} (default: none)",
    )
    p.add_argument(
        "--throughput-unit",
        help="unit of the throughput column: FLOP/s, GFLOP/s, TFLOP/s, B/s, GB/s or "
        "token/s (default FLOP/s)",
    )


def _read_csv(args: argparse.Namespace):
    from soak.importers import csv

    options = csv.CsvOptions(
        time_col=args.time_col,
        time_unit=args.time_unit,
        mapping=csv.parse_map(args.map),
        device_col=args.device_col,
        devices=args.devices,
        throughput_unit=args.throughput_unit,
    )
    return csv.read(args.file, options)


def _interval_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--interval",
        type=positive("--interval"),
        default=1.0,
        help="seconds between samples where the file has no time column (default 1)",
    )


def _nvidia_smi_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--query",
        help="the --query-gpu field list, for a file without header (default: none; "
        "the header names the columns)",
    )
    _interval_argument(p)


def _read_nvidia_smi(args: argparse.Namespace):
    from soak.importers import nvidia_smi

    query = nvidia_smi.parse_query(args.query) if args.query else None
    return nvidia_smi.read(args.file, query, args.interval)


def _read_dcgmi(args: argparse.Namespace):
    from soak.importers import dcgmi

    return dcgmi.read(args.file, args.interval)


def _gpu_burn_arguments(p: argparse.ArgumentParser) -> None:
    from soak.importers.gpu_burn import DEFAULT_OPS_PER_MUL

    p.add_argument(
        "--ops-per-mul",
        type=positive("--ops-per-mul"),
        default=float(DEFAULT_OPS_PER_MUL),
        help="FLOP per matrix multiply of the gpu-burn build (its OPS_PER_MUL; default "
        f"{DEFAULT_OPS_PER_MUL}, SIZE=2048; SIZE=8192 builds: 1100048498688)",
    )


def _read_gpu_burn(args: argparse.Namespace):
    from soak.importers import gpu_burn

    return gpu_burn.read(args.file, args.ops_per_mul)


FORMATS: dict[str, ImportFormat] = {
    "csv": ImportFormat(
        "any CSV with a header (long with --device-col, or wide with --devices N)",
        (
            "soak import csv trace.csv --time-col t --devices 4 --map temp_c=gpu{i}_temp",
            "soak import csv metrics.csv --time-col timestamp --time-unit iso "
            "--device-col gpu_index --map temp_c=temperature --map power_w=power",
        ),
        _csv_arguments,
        _read_csv,
    ),
    "nvidia-smi": ImportFormat(
        "nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits] -l N output",
        (
            "soak import nvidia-smi smi.csv",
            "soak import nvidia-smi smi-noheader.csv --query "
            "timestamp,index,temperature.gpu,power.draw --interval 5",
        ),
        _nvidia_smi_arguments,
        _read_nvidia_smi,
    ),
    "dcgmi-dmon": ImportFormat(
        "dcgmi dmon -e ... text output",
        (
            "soak import dcgmi-dmon dmon.txt",
            "soak import dcgmi-dmon dmon.txt.gz --interval 1 --host node7",
        ),
        _interval_argument,
        _read_dcgmi,
    ),
    "gpu-burn": ImportFormat(
        "gpu_burn stdout (its status records, as it prints them)",
        (
            "soak import gpu-burn gpu_burn.log",
            "soak import gpu-burn burn.zip --ops-per-mul 1100048498688 --host node3",
        ),
        _gpu_burn_arguments,
        _read_gpu_burn,
        default_workload="gemm",
    ),
}


def add_parser(sub: argparse._SubParsersAction) -> None:
    """`soak import` with one subcommand per entry of ``FORMATS``."""
    imp = sub.add_parser(
        "import",
        help="turn a foreign trace into a normal run and report",
        description="Read a telemetry trace recorded by another tool (a CSV, nvidia-smi or "
        "dcgmi dmon logs, gpu-burn's output) into a normal run folder, and judge it like a "
        "live run: equilibrium, cold vs steady, verdict. The last line printed is the report.",
    )
    formats = imp.add_subparsers(dest="format", required=True, parser_class=Parser)
    for name, fmt in FORMATS.items():
        p = subcommand(
            formats,
            name,
            fmt.summary,
            f"Import {fmt.summary} as a run: the load segment is detected (or given with "
            "--load-start/--load-end), signals the trace does not have are 'not available'.",
            fmt.examples,
        )
        p.add_argument("file", type=Path, help="the trace: plain, .gz, or a .zip holding one file")
        fmt.add_arguments(p)
        _common_arguments(p, fmt)
        p.set_defaults(handler=command)


def _common_arguments(p: argparse.ArgumentParser, fmt: ImportFormat) -> None:
    """What every format takes: the workload's name, the load segment, the run's labels."""
    p.add_argument(
        "--workload",
        default=fmt.default_workload,
        help=f"name of the workload the trace ran (default {fmt.default_workload})",
    )
    p.add_argument(
        "--load-start",
        type=positive("--load-start", allow_zero=True),
        help="load start, seconds from the first sample (default: detected)",
    )
    p.add_argument(
        "--load-end",
        type=positive("--load-end"),
        help="load end, seconds from the first sample (default: detected)",
    )
    p.add_argument(
        "--host", help="host name for the run (default: the file's name up to its first dot)"
    )
    p.add_argument(
        "--name", help="device model where the trace does not name it (default: unknown)"
    )
    p.add_argument(
        "--profile",
        metavar="NAME|FILE",
        help="acceptance profile to judge the trace by (built-in name or TOML file); its "
        "[sku] gives the devices' slowdown temperatures (default: the default profile, the "
        "SKU guessed from the trace's name column, else its memory.total and clocks.max.sm)",
    )
    p.add_argument(
        "--out", type=Path, default=Path("reports"), help="reports folder (default reports)"
    )
    p.add_argument(
        "--tag",
        type=tag,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="recorded with the run; repeatable (default: none)",
    )
    p.add_argument(
        "--stop",
        choices=("segment", "steady"),
        default="segment",
        help="steady: also replay --until-steady's sequential stop on the trace and say where "
        "it would have ended the soak (the verdict stays the whole segment's; default "
        "segment)",
    )


def command(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from soak.importers.core import FROZEN_BASIS, ImportOptions, write_run
    from soak.importers.source import describe
    from soak.pipeline import build_outputs, replay_stop
    from soak.profile import load_profile

    profile = load_profile(args.profile) if args.profile else None
    source = describe(args.file, args.format)
    trace = FORMATS[args.format].read(args)
    options = ImportOptions(
        workload=args.workload,
        host=args.host,
        out=args.out,
        tags=dict(args.tag),
        command=shlex.join(["soak", *argv]),
        load_start_s=args.load_start,
        load_end_s=args.load_end,
        name=args.name,
        profile=profile,
    )
    result = write_run(trace, source, options)
    seg = result.segment
    print(f"load segment: {seg.start_s:.1f} s to {seg.end_s:.1f} s ({seg.basis})")
    for line in result.sku_lines():
        print(line)
    if result.preferred:
        print(f"column precedence: {'; '.join(result.preferred)}")
    if result.unused:
        print(f"columns not used: {', '.join(result.unused)}")
    for other in result.others:
        why = other.basis if other.basis == FROZEN_BASIS else "not imported"
        print(f"  other segment: {other.start_s:.1f} s to {other.end_s:.1f} s ({why})")
    if result.frozen is not None:
        print(f"warning: device {result.frozen.device}: {result.frozen_text}", file=sys.stderr)
    if args.stop == "steady":
        print(replay_stop(result.run_dir))
    analysis, report = build_outputs(result.run_dir)
    print_verdict(analysis)
    print(report)
    return VERDICT_EXIT[analysis.verdict]
