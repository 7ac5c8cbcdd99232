"""The ``soak`` command: parsing and dispatch only.

Exit codes (DESIGN.md): 0 PASS, 1 FAIL, 2 usage or configuration error, 3 the run could not
complete (INCOMPLETE). Bad input is one line on stderr naming what is wrong, and creates
nothing.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from soak import __version__
from soak.config import RunConfig, load_profile
from soak.devices.base import BACKEND_NAMES, WORKLOAD_NAMES
from soak.errors import BackendUnavailable, ConfigError, SoakError, StoreError

EXIT_PASS, EXIT_FAIL, EXIT_USAGE, EXIT_INCOMPLETE = 0, 1, 2, 3
VERDICT_EXIT = {"PASS": EXIT_PASS, "FAIL": EXIT_FAIL, "INCOMPLETE": EXIT_INCOMPLETE}


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of printing usage and exiting."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise ConfigError(message)


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


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="soak", description="Burn-in soak benchmark for GPU servers.")
    parser.add_argument("--version", action="version", version=f"soak {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log more")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = sub.add_parser("run", help="run a soak and write its report")
    run.add_argument("--backend", default="auto", help=f"one of {', '.join(BACKEND_NAMES)}")
    run.add_argument("--workload", default="mix", help=f"one of {', '.join(WORKLOAD_NAMES)}")
    length = run.add_mutually_exclusive_group()
    length.add_argument("--hours", type=_positive("--hours"))
    length.add_argument("--minutes", type=_positive("--minutes"))
    run.add_argument(
        "--until-steady", action="store_true", help="stop once every device has its steady window"
    )
    run.add_argument("--interval", type=_positive("--interval"), default=1.0, help="tick (s)")
    run.add_argument(
        "--baseline",
        type=_positive("--baseline", allow_zero=True),
        default=10.0,
        help="idle baseline before the load (s)",
    )
    run.add_argument("--devices", type=_device_list, help="e.g. 0,1,2")
    run.add_argument("--profile", help="acceptance profile: a TOML file or a built-in name")
    run.add_argument("--out", type=Path, default=Path("reports"), help="reports folder")
    run.add_argument("--seed", type=_positive("--seed", int, allow_zero=True))
    run.add_argument("--tag", type=_tag, action="append", default=[], metavar="KEY=VALUE")
    run.add_argument(
        "--option",
        type=_workload_option,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="workload option, e.g. dtype=fp16",
    )
    run.add_argument("--heartbeat-timeout", type=_positive("--heartbeat-timeout"), default=120.0)
    run.add_argument("--sim-gpus", type=_positive("--sim-gpus", int), default=8)
    run.add_argument("--sim-sku", default="h100-sxm")
    run.add_argument("--sim-fault", action="append", default=[], metavar="SPEC")

    report = sub.add_parser(
        "report", help="rebuild summary.json, junit.xml and report.html from a run"
    )
    report.add_argument("run_dir", type=Path)
    report.add_argument("--profile", help="judge with another profile than the run's own")

    compare = sub.add_parser("compare", help="compare two runs of the same server")
    compare.add_argument("run_a", type=Path, help="run folder (or its summary.json): before")
    compare.add_argument("run_b", type=Path, help="run folder (or its summary.json): after")
    compare.add_argument("--out", type=Path, help="comparison report (default RUN_B/compare.html)")
    compare.add_argument(
        "--min-change",
        type=_positive("--min-change", allow_zero=True),
        default=1.0,
        metavar="PCT",
        help="flag a change only if it is at least this share of run A's figure, in %% "
        "(default 1), as well as beyond the noise",
    )

    devices = sub.add_parser("devices", help="list devices and their capability table")
    devices.add_argument("--backend", default="auto")
    devices.add_argument("--sim-gpus", type=_positive("--sim-gpus", int), default=8)
    devices.add_argument("--sim-sku", default="h100-sxm")
    return parser


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
    options = _workload_options(args.option)
    if args.backend != "sim":
        from workloads.base import WorkloadOptions

        step_s = options.get("step_s", WorkloadOptions().step_s)
        if isinstance(step_s, float) and args.heartbeat_timeout <= step_s:
            raise ConfigError(
                f"--heartbeat-timeout: {args.heartbeat_timeout:g} s must exceed the "
                f"workload's step_s of {step_s:g} s"
            )
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
        profile=load_profile(args.profile),
        out=args.out,
        seed=seed,
        tags=dict(args.tag),
        sim_gpus=args.sim_gpus,
        sim_sku=args.sim_sku,
        sim_faults=tuple(args.sim_fault),
        workload_options=options,
        heartbeat_timeout_s=args.heartbeat_timeout,
        command=shlex.join(["soak", *argv]),
    )


def _workload_options(pairs: Sequence[tuple[str, str]]) -> dict[str, object]:
    """Map --option KEY=VALUE onto the workload options' fields, typed by their annotations
    (``gemm_n: int | None`` takes a whole number), so that a bad value names its key."""
    if not pairs:
        return {}
    import typing

    from workloads.base import WorkloadOptions

    hints = typing.get_type_hints(WorkloadOptions)
    out: dict[str, object] = {}
    for key, text in pairs:
        if key not in hints:
            raise ConfigError(f"--option {key}: unknown (known: {', '.join(sorted(hints))})")
        out[key] = _typed(key, text, set(typing.get_args(hints[key])) or {hints[key]})
    try:
        WorkloadOptions(**out)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"--option: {exc}") from exc
    return out


def _typed(key: str, text: str, kinds: set[object]) -> object:
    """``text`` as the first of bool, int, float, str that the field takes."""
    if bool in kinds:
        if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
            raise ConfigError(f"--option {key}: {text!r} is not true or false")
        return text.lower() in ("true", "1", "yes")
    if int in kinds:
        try:
            return int(text)
        except ValueError:
            try:
                value = float(text)  # 4e9 bytes
            except ValueError:
                value = math.nan
            if not value.is_integer():
                raise ConfigError(f"--option {key}: {text!r} is not a whole number") from None
            return int(value)
    if float in kinds:
        try:
            return float(text)
        except ValueError:
            raise ConfigError(f"--option {key}: {text!r} is not a number") from None
    return text


def cmd_run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from soak.report import build_outputs
    from soak.runner import run

    config = _run_config(args, argv)
    result = run(config)
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

    devices, stop = len(analysis.devices), analysis.stop_reason
    for reason in merge_windows(analysis.reasons):
        where = "server" if reason.device is None else f"device {reason.device}"
        print(f"  {reason.status.upper():4}  {where}: {reason.check}: {reason.message}")
    print(f"verdict: {analysis.verdict} ({devices} devices, stop: {stop})")


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


def cmd_devices(args: argparse.Namespace) -> int:
    from soak.devices import BackendOptions, open_backend

    backend = open_backend(
        args.backend, BackendOptions(sim_gpus=args.sim_gpus, sim_sku=args.sim_sku)
    )
    try:
        infos = backend.devices()
        caps = backend.capabilities()
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
    return EXIT_PASS


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


def _error(exc: BaseException) -> None:
    """One line on stderr, whatever the message holds: control characters in what the
    operator typed (a newline, a carriage return) are shown escaped."""
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(exc))
    print(f"soak: error: {text}", file=sys.stderr)
