"""The ``soak`` command: parsing and dispatch only.

Exit codes (DESIGN.md): 0 PASS, 1 FAIL, 2 usage or configuration error, 3 the run could not
complete (INCOMPLETE). Bad input is one line on stderr naming what is wrong, and creates
nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import logging
import math
import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from soak import __version__
from soak.bmc import BMC_PROTOCOLS, BmcOptions
from soak.config import RunConfig, load_profile
from soak.devices.base import BACKEND_NAMES, WORKLOAD_NAMES
from soak.errors import BackendUnavailable, ConfigError, SoakError, StoreError
from soak.model import Verdict

EXIT_PASS, EXIT_FAIL, EXIT_USAGE, EXIT_INCOMPLETE = 0, 1, 2, 3
VERDICT_EXIT = {
    Verdict.PASS: EXIT_PASS,
    Verdict.FAIL: EXIT_FAIL,
    Verdict.INCOMPLETE: EXIT_INCOMPLETE,
}


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of printing usage and exiting, and suggests the option
    meant for a misspelt one."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise ConfigError(message)

    def parse_args(self, args=None, namespace=None):  # type: ignore[override]
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            raise ConfigError(_unrecognized(self, parsed, extras))
        return parsed


def _unrecognized(parser: argparse.ArgumentParser, parsed, extras: Sequence[str]) -> str:
    """ "unrecognized argument --minuets: did you mean --minutes?", from the options of the
    (sub)command that was parsed."""
    options = list(parser._option_string_actions)
    found = True
    while found:
        found = False
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                chosen = action.choices.get(getattr(parsed, action.dest, None) or "")
                if chosen is not None:
                    parser, found = chosen, True
                    options += list(chosen._option_string_actions)
                break
    words = []
    for extra in extras:
        close = []
        if extra.startswith("--"):
            close = difflib.get_close_matches(extra.split("=", 1)[0], options, n=1, cutoff=0.6)
        words.append(f"{extra} (did you mean {close[0]}?)" if close else extra)
    plural = "s" if len(extras) > 1 else ""
    return f"unrecognized argument{plural}: {' '.join(words)}"


def _positive(name: str, cast: type = float, allow_zero: bool = False):
    def parse(text: str) -> float:
        try:
            value = cast(text)
        except ValueError:
            raise ConfigError(f"{name}: {text!r} is not a number") from None
        if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
            raise ConfigError(f"{name}: must be {'>= 0' if allow_zero else '> 0'}, got {text}")
        return value

    return parse


def _device_list(text: str) -> tuple[int, ...]:
    try:
        indices = tuple(int(part) for part in text.split(",") if part.strip() != "")
    except ValueError:
        raise ConfigError(f"--devices: {text!r} is not a comma-separated list of indices") from None
    if not indices or any(i < 0 for i in indices) or len(set(indices)) != len(indices):
        raise ConfigError(f"--devices: {text!r} must list distinct indices >= 0")
    return indices


def _tag(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--tag: {text!r} is not KEY=VALUE")
    return key.strip(), value


def _workload_option(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ConfigError(f"--option: {text!r} is not KEY=VALUE")
    return key, value


def _sub(sub, name: str, summary: str, description: str, examples: Sequence[str]):
    """A subcommand with its one-line summary, a paragraph, and examples in its epilog."""
    epilog = "examples:\n" + "\n".join(f"  {e}" for e in examples)
    return sub.add_parser(
        name,
        help=summary,
        description=description,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="soak",
        description="Burn-in soak benchmark for GPU servers: loads every GPU at once, detects "
        "thermal equilibrium, and writes an acceptance report comparing cold and steady state.",
        epilog="exit codes: 0 PASS, 1 FAIL, 2 bad input or configuration, 3 run incomplete",
    )
    parser.add_argument("--version", action="version", version=f"soak {__version__}")
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="log more, on stderr (default: warnings only)"
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = _sub(
        sub,
        "run",
        "run a soak and write its report",
        "Load every device with the chosen workload for the given time, sample telemetry each "
        "tick into OUT/<host>/<UTC stamp>/soak.sqlite, detect each device's thermal "
        "equilibrium, then write summary.json, junit.xml and report.html there with a "
        "PASS/FAIL verdict. The last line printed is the report's path. Ctrl-C stops cleanly "
        "and still reports (INCOMPLETE).",
        [
            "soak run --hours 2                       # every GPU of this server, 2 hours",
            "soak run --backend sim --minutes 30 --sim-fault airflow:gpu=3:factor=2.2",
            "soak run --backend cpu --workload ddp --ranks 2 --minutes 2",
        ],
    )
    run.add_argument(
        "--backend",
        default="auto",
        help=f"telemetry backend: {', '.join(BACKEND_NAMES)} (default auto: NVIDIA, then AMD, "
        "then CPU)",
    )
    run.add_argument(
        "--workload",
        default="mix",
        help=f"load: {', '.join(WORKLOAD_NAMES)} (default mix: all three parts at once)",
    )
    length = run.add_mutually_exclusive_group()
    length.add_argument(
        "--hours",
        type=_positive("--hours"),
        metavar="H",
        help="soak length in hours, after the idle baseline (default 2; --minutes for shorter)",
    )
    length.add_argument(
        "--minutes", type=_positive("--minutes"), metavar="M", help="soak length in minutes"
    )
    run.add_argument(
        "--until-steady",
        action="store_true",
        help="stop early once every device has reached equilibrium and its 10-minute steady "
        "window (default: run the whole length)",
    )
    run.add_argument(
        "--interval",
        type=_positive("--interval"),
        default=1.0,
        metavar="S",
        help="telemetry sample interval in seconds (default 1)",
    )
    run.add_argument(
        "--baseline",
        type=_positive("--baseline", allow_zero=True),
        default=10.0,
        metavar="S",
        help="idle baseline before the load, in seconds (default 10)",
    )
    run.add_argument(
        "--devices",
        type=_device_list,
        metavar="0,1,...",
        help="device indices to soak (default: all)",
    )
    run.add_argument(
        "--profile",
        metavar="FILE|NAME",
        help="acceptance profile: a TOML file or a built-in name such as h100-sxm "
        "(default: the built-in default profile)",
    )
    run.add_argument(
        "--out",
        type=Path,
        default=Path("reports"),
        metavar="DIR",
        help="folder the run folder OUT/<host>/<UTC stamp>/ goes in (default reports)",
    )
    run.add_argument(
        "--seed",
        type=_positive("--seed", int, allow_zero=True),
        metavar="N",
        help="random seed of the workloads' data and of the simulator, recorded in the run "
        "(default: random on sim, 0 elsewhere)",
    )
    run.add_argument(
        "--tag",
        type=_tag,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="label recorded in the run and summary, e.g. rack=r12 (repeatable; default none)",
    )
    run.add_argument(
        "--option",
        type=_workload_option,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="workload option, e.g. dtype=fp16 or mem_fraction=0.5 (repeatable; default: the "
        "workload's own choice; an unknown key lists the known ones)",
    )
    run.add_argument(
        "--heartbeat-timeout",
        type=_positive("--heartbeat-timeout"),
        default=120.0,
        metavar="S",
        help="seconds a worker may stay silent before its device fails as hung (default 120)",
    )
    run.add_argument(
        "--ranks",
        type=_positive("--ranks", int),
        default=1,
        metavar="N",
        help="--workload ddp (or mix, with --option mix_sync=1 for lock-step training) on the "
        "CPU backend: N rank processes (gloo) sharing the CPU, shown as N devices (default 1)",
    )
    run.add_argument(
        "--metrics-port",
        type=_port,
        metavar="PORT",
        help="serve Prometheus metrics on this TCP port for the whole run; 0 picks a free port "
        "and prints it (default: no exporter)",
    )
    run.add_argument(
        "--metrics-addr",
        default="127.0.0.1",
        metavar="ADDR",
        help="address the metrics port listens on (default 127.0.0.1: this machine only)",
    )
    run.add_argument(
        "--sim-gpus",
        type=_positive("--sim-gpus", int),
        default=8,
        metavar="N",
        help="simulated devices, with --backend sim (default 8)",
    )
    run.add_argument(
        "--sim-sku",
        default="h100-sxm",
        metavar="NAME",
        help="simulated SKU: h100-sxm, h200, a100-sxm or mi300x (default h100-sxm)",
    )
    run.add_argument(
        "--sim-fault",
        action="append",
        default=[],
        metavar="SPEC",
        help="simulated fault KIND[:key=value]..., e.g. airflow:gpu=3:factor=2.2 (repeatable; "
        "default none; the README lists the kinds)",
    )
    _bmc_arguments(run)

    report = _sub(
        sub,
        "report",
        "rebuild summary.json, junit.xml and report.html from a run",
        "Analyse a run folder's store again and rewrite its summary.json, junit.xml and "
        "report.html: for a run whose coordinator was killed, or to judge a run with another "
        "profile. The store is only read.",
        [
            "soak report reports/node1/20261201T101500Z",
            "soak report reports/node1/20261201T101500Z --profile h100-sxm",
        ],
    )
    report.add_argument("run_dir", type=Path, help="the run folder (holding soak.sqlite)")
    report.add_argument(
        "--profile",
        metavar="FILE|NAME",
        help="judge with another profile than the run's own (default: the run's own)",
    )

    compare = _sub(
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
        type=_positive("--min-change", allow_zero=True),
        default=1.0,
        metavar="PCT",
        help="flag a change only if it is at least this share of run A's figure, in %% "
        "(default 1), as well as beyond the noise",
    )

    _import_parser(sub)

    devices = _sub(
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
        type=_positive("--sim-gpus", int),
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
    _fleet_parser(sub)
    return parser


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise ConfigError(f"--metrics-port: {text!r} is not a port number") from None
    if not 0 <= port <= 65535:
        raise ConfigError(f"--metrics-port: {port} is not in 0..65535")
    return port


def _import_parser(sub: argparse._SubParsersAction) -> None:
    imp = sub.add_parser(
        "import",
        help="turn a foreign trace into a normal run and report",
        description="Read a telemetry trace recorded by another tool (a CSV, nvidia-smi or "
        "dcgmi dmon logs, gpu-burn's output) into a normal run folder, and judge it like a "
        "live run: equilibrium, cold vs steady, verdict. The last line printed is the report.",
    )
    formats = imp.add_subparsers(dest="format", required=True, parser_class=_Parser)
    helps = {
        "csv": "any CSV with a header (long with --device-col, or wide with --devices N)",
        "nvidia-smi": "nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits] -l N output",
        "dcgmi-dmon": "dcgmi dmon -e ... text output",
        "gpu-burn": "gpu_burn stdout (its status records, as it prints them)",
    }
    examples = {
        "csv": [
            "soak import csv trace.csv --time-col t --devices 4 --map temp_c=gpu{i}_temp",
            "soak import csv metrics.csv --time-col timestamp --time-unit iso "
            "--device-col gpu_index --map temp_c=temperature --map power_w=power",
        ],
        "nvidia-smi": [
            "soak import nvidia-smi smi.csv",
            "soak import nvidia-smi smi-noheader.csv --query "
            "timestamp,index,temperature.gpu,power.draw --interval 5",
        ],
        "dcgmi-dmon": [
            "soak import dcgmi-dmon dmon.txt",
            "soak import dcgmi-dmon dmon.txt.gz --interval 1 --host node7",
        ],
        "gpu-burn": [
            "soak import gpu-burn gpu_burn.log",
            "soak import gpu-burn burn.zip --ops-per-mul 1100048498688 --host node3",
        ],
    }
    for name, text in helps.items():
        p = _sub(
            formats,
            name,
            text,
            f"Import {text} as a run: the load segment is detected (or given with "
            "--load-start/--load-end), signals the trace does not have are 'not available'.",
            examples[name],
        )
        p.add_argument("file", type=Path, help="the trace: plain, .gz, or a .zip holding one file")
        if name == "csv":
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
                type=_positive("--devices", int),
                help="number of devices in a wide file; {i} in --map is the device (default: none)",
            )
            p.add_argument(
                "--map",
                action="append",
                default=[],
                metavar="FIELD=COLUMN",
                help="soak field (temp_c, mem_temp_c, sm_clock_mhz, mem_clock_mhz, power_w, "
                "power_limit_w, util_pct, mem_util_pct, fan_pct, clock_reasons, throughput; "
                "inlet_c: the server's inlet in °C, e.g. a logged IPMI column, for the thermal "
                "headroom) from COLUMN; repeatable; COLUMN may hold {i} (default: none)",
            )
            p.add_argument(
                "--throughput-unit",
                help="unit of the throughput column: FLOP/s, GFLOP/s, TFLOP/s, B/s, GB/s or "
                "token/s (default FLOP/s)",
            )
        if name == "nvidia-smi":
            p.add_argument(
                "--query",
                help="the --query-gpu field list, for a file without header (default: none; "
                "the header names the columns)",
            )
        if name in ("nvidia-smi", "dcgmi-dmon"):
            p.add_argument(
                "--interval",
                type=_positive("--interval"),
                default=1.0,
                help="seconds between samples where the file has no time column (default 1)",
            )
        if name == "gpu-burn":
            from soak.importers.gpu_burn import DEFAULT_OPS_PER_MUL

            p.add_argument(
                "--ops-per-mul",
                type=_positive("--ops-per-mul"),
                default=float(DEFAULT_OPS_PER_MUL),
                help="FLOP per matrix multiply of the gpu-burn build (its OPS_PER_MUL; default "
                f"{DEFAULT_OPS_PER_MUL}, SIZE=2048; SIZE=8192 builds: 1100048498688)",
            )
        p.add_argument(
            "--workload",
            default="gemm" if name == "gpu-burn" else "imported",
            help="name of the workload the trace ran (default: gemm for gpu-burn, else imported)",
        )
        p.add_argument(
            "--load-start",
            type=_positive("--load-start", allow_zero=True),
            help="load start, seconds from the first sample (default: detected)",
        )
        p.add_argument(
            "--load-end",
            type=_positive("--load-end"),
            help="load end, seconds from the first sample (default: detected)",
        )
        p.add_argument(
            "--host", help="host name for the run (default: the file's name up to its first dot)"
        )
        p.add_argument(
            "--name",
            help="device model where the trace does not name it (default: unknown)",
        )
        p.add_argument(
            "--out", type=Path, default=Path("reports"), help="reports folder (default reports)"
        )
        p.add_argument(
            "--tag",
            type=_tag,
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="recorded with the run; repeatable (default: none)",
        )


def _fleet_parser(sub) -> None:
    fleet = sub.add_parser(
        "fleet",
        help="soak a cluster under Slurm; fleet report; GPU history",
        description="Acceptance of many servers: a Slurm batch script that soaks every node at "
        "once, one report over all their summary.json files, and a history per GPU.",
    )
    verbs = fleet.add_subparsers(dest="fleet_command", required=True, parser_class=_Parser)
    sbatch = _sub(
        verbs,
        "sbatch",
        "write (and with --submit submit) a Slurm script: one soak per node, one report",
        "soak fleet sbatch [OPTIONS] -- [soak run options]: every option after -- goes to each "
        "node's `soak run` (its --out is the fleet folder, default reports). The job runs one "
        "soak per node with srun, then `soak fleet report` once. The last line printed is the "
        "script's path.",
        [
            "soak fleet sbatch --nodes 32 --gpus-per-node 8 -- --hours 2 --out /shared/acc",
            "soak fleet sbatch --nodelist gpu[001-004] --partition burnin --submit -- --hours 1",
            "soak fleet sbatch --nodes 4 --gpus-per-node 8 --across-nodes -- --workload ddp",
        ],
    )
    sbatch.add_argument("--nodes", type=_positive("--nodes", int), help="nodes to soak (count)")
    sbatch.add_argument("--nodelist", help="Slurm node list, e.g. gpu[001-032] (default: any)")
    sbatch.add_argument("--partition", help="Slurm partition (default: the cluster's)")
    sbatch.add_argument("--account", help="Slurm account (default: yours)")
    sbatch.add_argument(
        "--gpus-per-node", type=_positive("--gpus-per-node", int), help="GPUs (default: none asked)"
    )
    sbatch.add_argument(
        "--no-exclusive", action="store_true", help="share nodes (default: --exclusive)"
    )
    sbatch.add_argument(
        "--margin-minutes",
        type=_positive("--margin-minutes", allow_zero=True),
        default=15.0,
        help="minutes added to the soak for start-up and the report in --time (default 15)",
    )
    sbatch.add_argument("--job-name", default="soak-fleet", help="job name (default soak-fleet)")
    sbatch.add_argument("--script", type=Path, help="script path (default OUT/soak-fleet.sbatch)")
    sbatch.add_argument(
        "--history", type=Path, help="the report's GPU history (default OUT/fleet-history.sqlite)"
    )
    sbatch.add_argument("--submit", action="store_true", help="submit with sbatch (default: no)")
    sbatch.add_argument(
        "--across-nodes",
        action="store_true",
        help="with --workload ddp: one torch.distributed group over every node, rendezvous "
        "from Slurm's environment (default: a group per node)",
    )
    sbatch.add_argument("run_args", nargs="*", metavar="-- RUN_OPTION", help="soak run options")

    report = _sub(
        verbs,
        "report",
        "fleet.html + fleet.json over every run in DIR",
        "Read every run's summary.json under DIR (never the stores) and write DIR/fleet.html and "
        "DIR/fleet.json: per-SKU distributions, fleet outliers by median/MAD, nodes ranked, a "
        "rack/slot heat map, missing nodes. With --table, the same on another tool's results.",
        [
            "soak fleet report /shared/acc",
            "soak fleet report out --table sgemm.csv --id-col uuid --map time=kernel_ms",
        ],
    )
    report.add_argument("dir", type=Path, help="folder of OUT/<host>/<run>/ (output folder too)")
    report.add_argument("--table", type=Path, help="CSV of per-device results from another tool")
    report.add_argument("--id-col", default="uuid", help="--table: device id column (default uuid)")
    report.add_argument(
        "--map",
        action="append",
        default=[],
        metavar="FIELD=COLUMN",
        help="--table: a column for a field (throughput or time, temp_c, power_w, sm_clock_mhz, "
        "node, sku, serial); none by default",
    )
    report.add_argument("--layout", type=Path, help="CSV host,rack,slot (default: run tags)")
    report.add_argument(
        "--expect", type=Path, help="node list, one host a line (default DIR/fleet-nodes.txt)"
    )
    report.add_argument(
        "--k-mad",
        type=_positive("--k-mad"),
        default=3.0,
        help="outlier distance in robust σ (1.4826·MAD) from the fleet median (default 3)",
    )
    report.add_argument(
        "--min-deficit",
        type=_positive("--min-deficit", allow_zero=True),
        default=3.0,
        help="never flag throughput less than this many %% below the median (default 3)",
    )
    report.add_argument(
        "--min-temp-excess",
        type=_positive("--min-temp-excess", allow_zero=True),
        default=5.0,
        help="never flag a steady temperature less than this many °C over the median (default 5)",
    )
    report.add_argument(
        "--history",
        type=Path,
        help="GPU history to add the runs to (default DIR/fleet-history.sqlite; not with --table)",
    )
    report.add_argument("--no-history", action="store_true", help="add nothing to a history")

    history = _sub(
        verbs,
        "history",
        "one GPU's runs over time, and its drift",
        "Print every recorded run of one GPU (by serial or UUID) from a fleet history file, "
        "and flag a drift of its steady throughput or temperature against its first acceptance.",
        [
            "soak fleet history 1650123456789 --history /shared/acc/fleet-history.sqlite",
            "soak fleet history GPU-87570fdd-0000 --history h.sqlite --drift 2",
        ],
    )
    history.add_argument("device", help="the GPU's serial or UUID")
    history.add_argument("--history", type=Path, required=True, help="the history file")
    history.add_argument(
        "--drift",
        type=_positive("--drift"),
        default=3.0,
        help="flag a steady throughput this many %% below the first acceptance (default 3)",
    )
    history.add_argument(
        "--drift-temp",
        type=_positive("--drift-temp"),
        default=5.0,
        help="flag a steady temperature this many °C above the first acceptance (default 5)",
    )


def _bmc_arguments(run: argparse.ArgumentParser) -> None:
    """The BMC the inlet is read from, and the inlet the headroom is projected to."""
    run.add_argument(
        "--bmc",
        metavar="HOST",
        help="read the inlet temperature from this BMC (out of band; a URL such as "
        "https://host:8443 for Redfish) (default: the simulator's own BMC with --backend sim, "
        "else in-band IPMI where /dev/ipmi0 exists)",
    )
    run.add_argument(
        "--bmc-protocol",
        choices=BMC_PROTOCOLS,
        default="redfish",
        help="how to reach --bmc: redfish (DMTF's redfish library) or ipmi (ipmitool -I lan) "
        "(default redfish)",
    )
    run.add_argument(
        "--bmc-port",
        type=_port,
        metavar="PORT",
        help="TCP (Redfish) or UDP (IPMI) port of --bmc (default 443 for Redfish, 623 for IPMI)",
    )
    run.add_argument(
        "--bmc-user", default="admin", metavar="NAME", help="BMC user name (default admin)"
    )
    run.add_argument(
        "--bmc-password-file",
        type=Path,
        metavar="FILE",
        help="file whose first line is the BMC password (default: the SOAK_BMC_PASSWORD "
        "environment variable; never on the command line, never stored)",
    )
    run.add_argument(
        "--bmc-insecure",
        action="store_true",
        help="do not verify the Redfish BMC's TLS certificate (default: verified)",
    )
    run.add_argument(
        "--bmc-ca-file",
        type=Path,
        metavar="FILE",
        help="CA certificates to verify the Redfish BMC with (default: the system's bundle)",
    )
    run.add_argument(
        "--bmc-ipmi-auth",
        metavar="TYPE",
        help="ipmitool's -A authentication type for --bmc-protocol ipmi, e.g. MD5 "
        "(default: ipmitool's choice)",
    )
    run.add_argument(
        "--bmc-inlet-sensor",
        metavar="NAME",
        help="the BMC's sensor that measures the inlet air, by name (default: chosen by entity "
        "and name: Inlet, Intake, Ambient; a wrong name lists the sensors found)",
    )
    run.add_argument(
        "--design-inlet",
        type=_celsius("--design-inlet"),
        metavar="C",
        help="inlet temperature in °C each device's headroom is projected to (default: the "
        "profile's design_inlet_c, 35 in the built-in ones: ASHRAE A2 allowable)",
    )


def _celsius(name: str):
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise ConfigError(f"{name}: {text!r} is not a temperature in °C") from None
        if not math.isfinite(value) or not -40 <= value <= 80:
            raise ConfigError(f"{name}: {text} °C is outside -40 to 80 °C")
        return value

    return parse


def _bmc_options(args: argparse.Namespace) -> BmcOptions:
    bmc_only = ("bmc_port", "bmc_password_file", "bmc_ca_file", "bmc_ipmi_auth")
    if args.bmc is None:
        given = [n for n in bmc_only if getattr(args, n) is not None]
        if given or args.bmc_insecure:
            flag = "--" + (given[0] if given else "bmc_insecure").replace("_", "-")
            raise ConfigError(f"{flag}: only with --bmc HOST")
    if args.bmc_password_file is not None and not args.bmc_password_file.is_file():
        raise ConfigError(f"--bmc-password-file {args.bmc_password_file}: no such file")
    if args.bmc_ca_file is not None and not args.bmc_ca_file.is_file():
        raise ConfigError(f"--bmc-ca-file {args.bmc_ca_file}: no such file")
    return BmcOptions(
        host=args.bmc,
        protocol=args.bmc_protocol,
        port=args.bmc_port,
        user=args.bmc_user,
        password_file=args.bmc_password_file,
        insecure=args.bmc_insecure,
        ca_file=args.bmc_ca_file,
        inlet_sensor=args.bmc_inlet_sensor,
        ipmi_auth=args.bmc_ipmi_auth,
    )


def _run_config(args: argparse.Namespace, argv: Sequence[str]) -> RunConfig:
    # The backend's name, the sim's SKU, size and faults are checked where they are used
    # (soak.devices.open_backend, SimServer), which `run` does before creating anything.
    if args.workload not in WORKLOAD_NAMES:
        raise ConfigError(
            f"--workload: unknown workload {args.workload!r} ({', '.join(WORKLOAD_NAMES)})"
        )
    if args.hours is not None:
        duration = args.hours * 3600
    elif args.minutes is not None:
        duration = args.minutes * 60
    else:
        duration = 7200.0
    profile = load_profile(args.profile)
    if args.design_inlet is not None:
        checks = dataclasses.replace(profile.checks, design_inlet_c=args.design_inlet)
        profile = dataclasses.replace(profile, checks=checks)
    _check_length(args, duration, profile.windows)
    options = _workload_options(args.option)
    if args.backend != "sim":
        from workloads.base import WorkloadOptions

        step_s = options.get("step_s", WorkloadOptions().step_s)
        if isinstance(step_s, float) and args.heartbeat_timeout <= step_s:
            raise ConfigError(
                f"--heartbeat-timeout: {args.heartbeat_timeout:g} s must exceed the "
                f"workload's step_s of {step_s:g} s"
            )
    lock_step = args.workload == "ddp" or (args.workload == "mix" and options.get("mix_sync"))
    if args.ranks != 1 and (not lock_step or args.backend != "cpu"):
        raise ConfigError(
            "--ranks: only with --backend cpu and --workload ddp, or mix with --option mix_sync=1"
        )
    if args.backend == "sim" and options.get("mix_sync"):
        raise ConfigError("--option mix_sync: the simulator does not model lock-step mix")
    if args.sim_fault and args.backend != "sim":
        raise ConfigError("--sim-fault: only with --backend sim")
    seed = args.seed
    if seed is None and args.backend == "sim":
        seed = int.from_bytes(os.urandom(3), "big")  # recorded: reproducible
    return RunConfig(
        backend=args.backend,
        workload=args.workload,
        duration_s=duration,
        until_steady=args.until_steady,
        interval_s=args.interval,
        baseline_s=args.baseline,
        devices=args.devices,
        profile=profile,
        out=args.out,
        seed=seed,
        tags=dict(args.tag),
        sim_gpus=args.sim_gpus,
        sim_sku=args.sim_sku,
        sim_faults=tuple(args.sim_fault),
        workload_options=options,
        heartbeat_timeout_s=args.heartbeat_timeout,
        ranks=args.ranks,
        command=shlex.join(["soak", *argv]),
        bmc=_bmc_options(args),
    )


MIN_COLD_MEASURED_S = 15.0  # the least of the cold window whose rate is worth comparing


def _length_flag(args: argparse.Namespace) -> str:
    return f"--hours {args.hours:g}" if args.hours is not None else f"--minutes {args.minutes:g}"


def _check_length(args: argparse.Namespace, duration_s: float, windows) -> None:
    """Refuse a load too short to measure a cold rate (nothing could be compared)."""
    least = windows.cold_start_s + MIN_COLD_MEASURED_S
    if duration_s < least:
        raise ConfigError(
            f"{_length_flag(args)}: {duration_s:.1f} s of load measures nothing: the cold "
            f"window starts {windows.cold_start_s:g} s into the load and a cold rate needs "
            f"{MIN_COLD_MEASURED_S:g} s of it; at least {least:g} s "
            f"(--minutes {math.ceil(least / 60 * 100) / 100:g})"
        )


def length_note(duration_s: float, windows) -> str | None:
    """One line for a load that can run but cannot confirm thermal equilibrium: the verdict
    will say equilibrium was not reached, and what length would reach it."""
    from soak.analysis.equilibrium import shortest_confirmation_s

    need = shortest_confirmation_s(windows)
    if duration_s >= need:
        return None
    full = need + windows.steady_length_s
    return (
        f"soak: note: {duration_s / 60:.3g} min of load is too short to confirm thermal "
        f"equilibrium, which needs {need / 60:g} min at least (--minutes {math.ceil(need / 60)});"
        f" with its {windows.steady_length_s / 60:g}-min steady window, "
        f"--minutes {math.ceil(full / 60)} or more"
    )


def _check_node_group(workload: str, backend: str, env: Mapping[str, str]) -> None:
    """A multi-node ddp group in the environment (set by `soak fleet sbatch --across-nodes`):
    well-formed, and only for the ddp workload on a backend that runs real ranks."""
    from soak.nodegroup import from_env

    group = from_env(env)
    if group is None:
        return
    if workload != "ddp":
        raise ConfigError(
            f"ddp across nodes (SOAK_DDP_NODES set): --workload is {workload}, not ddp"
        )
    if backend == "sim":
        raise ConfigError(SIM_ACROSS_NODES)


SIM_ACROSS_NODES = (
    "--across-nodes: not with --backend sim (the simulated ddp runs in one process and cannot "
    "span nodes)"
)


def _workload_options(pairs: Sequence[tuple[str, str]]) -> dict[str, object]:
    """--option KEY=VALUE pairs, typed by the workload options themselves; a bad one is a
    one-line ConfigError naming its key."""
    from workloads.base import OptionError, WorkloadOptions

    try:
        return WorkloadOptions.typed(pairs)
    except OptionError as exc:
        raise ConfigError(f"--option {exc}") from None


class _FirstTick:
    """A watcher that prints one line at the run's first tick, after every check of the
    input has passed."""

    def __init__(self, line: str, stream) -> None:
        self.line: str | None = line
        self.stream = stream

    def update(self, progress) -> None:
        if self.line is not None:
            print(self.line, file=self.stream, flush=True)
            self.line = None

    def close(self) -> None:
        pass


def cmd_run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from soak.live.view import make_view
    from soak.report import build_outputs
    from soak.runner import run

    config = _run_config(args, argv)
    _check_node_group(config.workload, config.backend, os.environ)
    windows = config.profile.windows
    watchers: list = [make_view(sys.stderr)]
    note = length_note(config.duration_s, windows)
    if note is not None:  # once the run has started: bad input is one line, the error's
        watchers.insert(0, _FirstTick(note, sys.stderr))
    if args.metrics_port is not None:  # bound now: a port in use is bad input, before any soak
        from soak.live.exporter import MetricsExporter

        exporter = MetricsExporter(args.metrics_port, args.metrics_addr)
        print(f"soak: Prometheus metrics on {exporter.url}", file=sys.stderr, flush=True)
        watchers.append(exporter)
    result = run(config, watchers=watchers)
    try:
        analysis, report = build_outputs(result.run_dir, config.profile)
    except OSError as exc:  # a disk that filled up: the store has the run, the report waits
        raise SoakError(
            f"{result.run_dir}: cannot write the report ({exc.strerror or exc}); the store "
            f"keeps the run: make room, then run `soak report {result.run_dir}`"
        ) from exc
    _print_verdict(analysis)
    print(report)
    return VERDICT_EXIT[analysis.verdict]


def _print_verdict(analysis) -> None:
    """The reasons, then the verdict: with the report path after it, the last two lines."""
    from soak.analysis.analyze import merge_windows
    from soak.units import plural

    devices, stop = len(analysis.devices), analysis.stop_reason
    for reason in merge_windows(analysis.reasons):
        where = "server" if reason.device is None else f"device {reason.device}"
        print(f"  {reason.status.upper():4}  {where}: {reason.check}: {reason.message}")
    print(f"verdict: {analysis.verdict} ({plural(devices, 'device')}, stop: {stop})")


def cmd_report(args: argparse.Namespace) -> int:
    from soak.report import build_outputs

    profile = load_profile(args.profile) if args.profile else None
    analysis, report = build_outputs(args.run_dir, profile)
    _print_verdict(analysis)
    print(report)
    return VERDICT_EXIT[analysis.verdict]


def cmd_compare(args: argparse.Namespace) -> int:
    from soak.report import compare

    comparison = compare.compare_runs(args.run_a, args.run_b, args.min_change / 100)
    out = compare.write_comparison(comparison, args.out or compare.default_output(args.run_b))
    print(f"A: {comparison.a.label}  ({comparison.a.path})")
    print(f"B: {comparison.b.label}  ({comparison.b.path})")
    for note in comparison.notes:
        print(f"note: {note}")
    print(compare.table(comparison))
    print(f"compare: {compare.headline(comparison)}")
    print(out)
    return EXIT_PASS


def cmd_import(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from soak.importers.core import FROZEN_BASIS, ImportOptions, write_run
    from soak.importers.source import describe
    from soak.report import build_outputs

    source = describe(args.file, args.format)
    trace = _read_trace(args)
    options = ImportOptions(
        workload=args.workload,
        host=args.host,
        out=args.out,
        tags=dict(args.tag),
        command=shlex.join(["soak", *argv]),
        load_start_s=args.load_start,
        load_end_s=args.load_end,
        name=args.name,
    )
    result = write_run(trace, source, options)
    seg = result.segment
    print(f"load segment: {seg.start_s:.1f} s to {seg.end_s:.1f} s ({seg.basis})")
    for other in result.others:
        why = other.basis if other.basis == FROZEN_BASIS else "not imported"
        print(f"  other segment: {other.start_s:.1f} s to {other.end_s:.1f} s ({why})")
    if result.frozen is not None:
        print(
            f"warning: device {result.frozen.device}: {result.frozen.describe()}; the judged "
            f"load ends at {result.frozen.from_s:,.0f} s",
            file=sys.stderr,
        )
    analysis, report = build_outputs(result.run_dir)
    _print_verdict(analysis)
    print(report)
    return VERDICT_EXIT[analysis.verdict]


def _read_trace(args: argparse.Namespace):
    if args.format == "csv":
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
    if args.format == "nvidia-smi":
        from soak.importers import nvidia_smi

        query = nvidia_smi.parse_query(args.query) if args.query else None
        return nvidia_smi.read(args.file, query, args.interval)
    if args.format == "dcgmi-dmon":
        from soak.importers import dcgmi

        return dcgmi.read(args.file, args.interval)
    from soak.importers import gpu_burn

    return gpu_burn.read(args.file, args.ops_per_mul)


def cmd_devices(args: argparse.Namespace) -> int:
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


def cmd_fleet(args: argparse.Namespace) -> int:
    if args.fleet_command == "sbatch":
        return _fleet_sbatch(args)
    if args.fleet_command == "report":
        return _fleet_report(args)
    return _fleet_history(args)


def _fleet_sbatch(args: argparse.Namespace) -> int:
    from soak.fleet import sbatch

    run_args = list(args.run_args)
    # Every node runs these: check them here, where a mistake costs nothing.
    run = _parser().parse_args(["run", *run_args])
    config = _run_config(run, ["run", *run_args])
    if args.across_nodes and config.workload != "ddp":
        raise ConfigError(f"--across-nodes: only with --workload ddp (not {config.workload})")
    if args.across_nodes and config.backend == "sim":
        raise ConfigError(SIM_ACROSS_NODES)
    out = config.out.resolve()
    report_args = ("--history", str(args.history.resolve())) if args.history else ()
    spec = sbatch.BatchSpec(
        out=out,
        run_args=sbatch.without_out(run_args),
        duration_s=config.duration_s,
        baseline_s=config.baseline_s,
        nodes=args.nodes,
        nodelist=args.nodelist,
        partition=args.partition,
        account=args.account,
        gpus_per_node=args.gpus_per_node,
        exclusive=not args.no_exclusive,
        margin_s=args.margin_minutes * 60,
        job_name=args.job_name,
        report_args=report_args,
        across_nodes=args.across_nodes,
    )
    sbatch.check_spec(spec)
    path = sbatch.write_script(args.script or out / sbatch.SCRIPT_NAME, sbatch.render_script(spec))
    if args.submit:
        print(f"submitted: job {sbatch.submit(path)}")
    print(path)
    return EXIT_PASS


def _fleet_report(args: argparse.Namespace) -> int:
    from soak.fleet import collect, history
    from soak.fleet.analyze import Settings, read_layout
    from soak.fleet.report import make_report
    from soak.fleet.sync import find_groups

    layout = read_layout(args.layout) if args.layout else None
    expect = collect.read_node_list(args.expect) if args.expect else None
    if args.table is not None:
        if args.history is not None:
            raise ConfigError("--history: not with --table (a table has no runs to record)")
        data = collect.collect_table(args.table, args.id_col, collect.parse_map(args.map))
        data.expected = expect
    else:
        if args.map:
            raise ConfigError("--map: only with --table")
        data = collect.collect_summaries(args.dir, expect)
    settings = Settings(args.k_mad, args.min_deficit / 100, args.min_temp_excess)
    db = (
        None if args.table or args.no_history else args.history or args.dir / "fleet-history.sqlite"
    )
    if db is not None:
        history.check_path(db)
    result, html = make_report(data, args.dir, settings, layout)
    if db is not None:
        added = history.record_runs(db, collect.all_runs(args.dir))
        print(f"history: {added} new runs recorded in {db}")
    counts = f"{len(data.nodes)} nodes, {sum(len(n.devices) for n in data.nodes)} devices"
    print(f"fleet: {result.verdict} ({counts}, {len(result.outliers)} outliers)")
    for o in result.outliers:
        print(f"  {o.status.upper():4}  {o.device.uuid or o.device.serial}: {o.message}")
    for host in result.missing:
        print(f"  MISSING  {host}: expected, but left no summary.json")
    for path, why in data.unreadable:
        print(f"  UNREADABLE  {path}: {why}")
    for group in find_groups(data):
        print(f"  DDP  {group.name or group.master}: {group.pace_message()}")
        for line in group.failure_messages():
            print(f"  DDP  {group.name or group.master}: rank lost: {line}")
    print(html)
    return VERDICT_EXIT[result.verdict]


def _fleet_history(args: argparse.Namespace) -> int:
    from soak.fleet import history

    entries = history.device_runs(args.history, args.device)
    if not entries:
        raise ConfigError(f"{args.device}: no device with that serial or UUID in {args.history}")
    found = history.drifts(entries, args.drift / 100, args.drift_temp)
    for line in history.format_history(args.device, entries, found):
        print(line)
    print(args.history)
    return EXIT_FAIL if found else EXIT_PASS


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = _parser().parse_args(argv)
    except ConfigError as exc:
        _error(exc)
        return EXIT_USAGE
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="soak: %(levelname)s: %(name)s: %(message)s",
    )
    try:
        if args.command == "run":
            return cmd_run(args, argv)
        if args.command == "report":
            return cmd_report(args)
        if args.command == "compare":
            return cmd_compare(args)
        if args.command == "import":
            return cmd_import(args, argv)
        if args.command == "fleet":
            return cmd_fleet(args)
        return cmd_devices(args)
    except (ConfigError, BackendUnavailable) as exc:
        _error(exc)
        return EXIT_USAGE
    except StoreError as exc:
        _error(exc)
        return EXIT_USAGE if args.command != "run" else EXIT_INCOMPLETE
    except SoakError as exc:
        _error(exc)
        return EXIT_INCOMPLETE
    except KeyboardInterrupt:  # a second Ctrl-C: the runner has closed the store
        print("soak: interrupted", file=sys.stderr)
        return EXIT_INCOMPLETE
    except Exception as exc:  # a bug: its traceback for the report, and never exit 1 (FAIL)
        import traceback

        traceback.print_exc()
        _error(SoakError(f"internal error: {type(exc).__name__}: {exc}"))
        return EXIT_INCOMPLETE


def _error(exc: BaseException) -> None:
    """One line on stderr, whatever the message holds: control characters in what the
    operator typed (a newline, a carriage return) are shown escaped."""
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(exc))
    print(f"soak: error: {text}", file=sys.stderr)
