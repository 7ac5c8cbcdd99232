"""`soak run`: its options and the command. The rules between the options are the run
config's own (``soak.config.RunConfig``), checked before anything is created."""

from __future__ import annotations

import argparse
import math
import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from soak.bmc import BMC_PROTOCOLS, BmcOptions
from soak.cli.args import (
    VERDICT_EXIT,
    add_design_inlet,
    device_list,
    port,
    positive,
    print_verdict,
    subcommand,
    tag,
    workload_option,
)
from soak.config import RunConfig
from soak.devices.base import BACKEND_NAMES, WORKLOAD_NAMES
from soak.errors import ConfigError, SoakError
from soak.profile import load_profile


def add_parser(sub: argparse._SubParsersAction) -> None:
    """`soak run` and its options."""
    run = subcommand(
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
    for add in (_what_and_how_long, _where_and_labels, _workers_and_metrics, _simulator):
        add(run)
    _bmc_arguments(run)
    run.set_defaults(handler=command)


def _what_and_how_long(run: argparse.ArgumentParser) -> None:
    """The backend, the workload, the length and the sampling."""
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
        type=positive("--hours"),
        metavar="H",
        help="soak length in hours, after the idle baseline (default 2; --minutes for shorter)",
    )
    length.add_argument(
        "--minutes",
        type=positive("--minutes"),
        metavar="M",
        help="soak length in minutes, after the idle baseline (default 120, as --hours 2; "
        "under the profile's min_load_s, 11 min, nothing is accepted: INCOMPLETE)",
    )
    run.add_argument(
        "--until-steady",
        action="store_true",
        help="stop as soon as every device has reached equilibrium and every check is decided "
        "at 95 %% confidence (docs/verdict.md; default: run the whole length)",
    )
    run.add_argument(
        "--max-minutes",
        type=positive("--max-minutes"),
        default=50.0,
        metavar="M",
        help="with --until-steady, stop after this many minutes of load whatever is still "
        "undecided (default 50)",
    )
    run.add_argument(
        "--interval",
        type=positive("--interval"),
        default=1.0,
        metavar="S",
        help="telemetry sample interval in seconds (default 1)",
    )
    run.add_argument(
        "--baseline",
        type=positive("--baseline", allow_zero=True),
        default=10.0,
        metavar="S",
        help="idle baseline before the load, in seconds (default 10)",
    )
    run.add_argument(
        "--devices",
        type=device_list,
        metavar="0,1,...",
        help="device indices to soak (default: all)",
    )


def _where_and_labels(run: argparse.ArgumentParser) -> None:
    """The profile, where the run goes, and what it is labelled with."""
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
        type=positive("--seed", int, allow_zero=True),
        metavar="N",
        help="random seed of the workloads' data and of the simulator, recorded in the run "
        "(default: random on sim, 0 elsewhere)",
    )
    run.add_argument(
        "--tag",
        type=tag,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="label recorded in the run and summary, e.g. rack=r12 (repeatable; default none)",
    )
    run.add_argument(
        "--option",
        type=workload_option,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="workload option, e.g. dtype=fp16 or mem_fraction=0.5 (repeatable; default: the "
        "workload's own choice; an unknown key lists the known ones)",
    )


def _workers_and_metrics(run: argparse.ArgumentParser) -> None:
    """The workers' heartbeat and ranks, and the Prometheus exporter."""
    run.add_argument(
        "--heartbeat-timeout",
        type=positive("--heartbeat-timeout"),
        default=120.0,
        metavar="S",
        help="seconds a worker may stay silent before its device fails as hung (default 120)",
    )
    run.add_argument(
        "--ranks",
        type=positive("--ranks", int),
        default=1,
        metavar="N",
        help="--workload ddp (or mix, with --option mix_sync=1 for lock-step training) on the "
        "CPU backend: N rank processes (gloo) sharing the CPU, shown as N devices (default 1)",
    )
    run.add_argument(
        "--metrics-port",
        type=port("--metrics-port"),
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


def _simulator(run: argparse.ArgumentParser) -> None:
    """The simulated server's size, SKU and faults."""
    run.add_argument(
        "--sim-gpus",
        type=positive("--sim-gpus", int),
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
        type=port("--bmc-port"),
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
    add_design_inlet(run)


def _bmc_options(args: argparse.Namespace) -> BmcOptions:
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


def run_config(
    args: argparse.Namespace, argv: Sequence[str], env: Mapping[str, str] | None = None
) -> RunConfig:
    """The run the options ask for; ``RunConfig`` checks the rules between them. ``env``
    holds the node group of a ddp run across nodes (``soak.nodegroup``); None: none."""
    from soak.nodegroup import from_env

    if args.hours is not None:
        duration = args.hours * 3600
    elif args.minutes is not None:
        duration = args.minutes * 60
    else:
        duration = 7200.0
    profile = load_profile(args.profile)
    if args.design_inlet is not None:
        profile = profile.with_design_inlet(args.design_inlet)
    seed = args.seed
    if seed is None and args.backend == "sim":
        seed = int.from_bytes(os.urandom(3), "big")  # recorded: reproducible
    return RunConfig(
        backend=args.backend,
        workload=args.workload,
        duration_s=duration,
        until_steady=args.until_steady,
        max_s=args.max_minutes * 60,
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
        workload_options=_workload_options(args.option),
        heartbeat_timeout_s=args.heartbeat_timeout,
        ranks=args.ranks,
        command=shlex.join(["soak", *argv]),
        bmc=_bmc_options(args),
        node_group=None if env is None else from_env(env),
    )


def length_note(duration_s: float, windows, min_load_s: float = 0.0) -> str | None:
    """One line for a load that can run but cannot confirm thermal equilibrium: the verdict
    will say equilibrium was not reached, and what length would reach it; under the
    profile's ``min_load_s``, that nothing will be accepted on it."""
    from soak.analysis.equilibrium import shortest_confirmation_s

    need = shortest_confirmation_s(windows)
    length = f"soak: note: {duration_s / 60:.3g} min of load"
    if duration_s >= need:
        if duration_s >= min_load_s:
            return None
        return (
            f"{length} is under the profile's min_load_s ({min_load_s / 60:g} min): a device "
            "that reaches no thermal equilibrium in it cannot be judged (INCOMPLETE)"
        )
    full = max(need, min_load_s) + windows.steady_length_s
    note = (
        f"{length} is too short to confirm thermal equilibrium, which needs {need / 60:g} min "
        f"at least (--minutes {math.ceil(need / 60)}); with its "
        f"{windows.steady_length_s / 60:g}-min steady window, --minutes {math.ceil(full / 60)} "
        "or more"
    )
    if duration_s < min_load_s:
        note += (
            f". Nothing is accepted on under {min_load_s / 60:g} min (the profile's "
            "min_load_s): a try of the set-up, whose verdict is INCOMPLETE unless something "
            "fails"
        )
    return note


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


def command(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from soak.live.view import make_view
    from soak.pipeline import build_outputs
    from soak.runner import run

    config = run_config(args, argv, os.environ)
    windows = config.profile.windows
    watchers: list = [make_view(sys.stderr)]
    note = length_note(config.duration_s, windows, config.profile.checks.min_load_s)
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
    print_verdict(analysis)
    print(report)
    return VERDICT_EXIT[analysis.verdict]
