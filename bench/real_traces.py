"""soak's equilibrium time and verdict on real public traces, against a reference time.

Imports every trace with a time axis that is on this machine (``testkit.traces``: the traces
that travel with the project in ``bench/data/real-traces/``, the V100 gpu-burn runs as
derived CSV and as raw gpu-burn logs and the H100 nanoGPT CSVs, and a folder named by
``SOAK_REAL_TRACES``, where the B200 step files can be put: their licence does not let them
travel) with ``soak import``'s own readers into a normal run store, analyses it as ``soak
report`` does (default profile), and prints the traces it skips and those missing (and why),
then per device the reference equilibrium time, soak's, the delay (soak − reference), where
``--until-steady``'s sequential stop would have ended the soak
(``soak.analysis.decision.replay``, as ``soak import --stop steady``; server-wide, from the
device's load start) and how long after the reference that is, and the verdict, then one
JSON line. Times are minutes from the load start. The accuracy contract
(docs/equilibrium.md): a delay in [−2, +5] min.

The reference (issue 13, point 6) is ``testkit.reference.reference_time``: the centre of the
first 5-minute window after which the centred 5-minute mean temperature stays within 1.5 °C
of the median of the last 30 minutes of load (ignoring the last 2 minutes), and, where
throughput is measured, its centred 5-minute mean stays within 1 % of its last-30-minute
median.

The V100 derived CSVs are read twice: as they are, and temperature only (``v100-temp``:
the throughput left out, as an nvidia-smi log has none; the V100 traces hold no clocks), so
the rule is judged on the temperature alone, against a reference from the temperature alone.

``--traces DIR`` looks in DIR first (as ``SOAK_REAL_TRACES`` does); ``--only SUBSTRING``
limits the traces; ``--keep DIR`` keeps the run folders. ``--without CLAUSE`` (repeatable;
``soak.analysis.equilibrium.CLAUSE_NAMES``) analyses every trace again with that clause of
the rule off, and prints each device's delay with every clause on and with each one off,
side by side, and a summary per group for each.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from soak.analysis.analyze import analyze_run  # noqa: E402
from soak.analysis.decision import replay, truncated  # noqa: E402
from soak.analysis.equilibrium import CLAUSE_NAMES  # noqa: E402
from soak.dataset import RunData  # noqa: E402
from soak.importers import csv as csv_import  # noqa: E402
from soak.importers import gpu_burn  # noqa: E402
from soak.importers.core import ImportOptions, Trace, write_run  # noqa: E402
from soak.importers.source import describe  # noqa: E402
from soak.profile import load_profile  # noqa: E402
from soak.store import STORE_NAME, RunStore  # noqa: E402
from testkit.clauses import clauses_off  # noqa: E402
from testkit.reference import reference_time  # noqa: E402
from testkit.traces import h100_csv_options, missing_reason, trace_dir  # noqa: E402

EARLY_MIN, LATE_MIN = -2.0, 5.0


# -- the traces ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    name: str
    path: Path
    read: Callable[[Path], Trace]
    workload: str


def _v100(v100: Path) -> list[Case]:
    out: list[Case] = []
    for f in sorted((v100 / "derived").glob("*_parsed.csv")):
        options = csv_import.CsvOptions(
            time_col="est_elapsed_s_from_gpu0",
            time_unit="s",
            devices=4,
            mapping={"temp_c": "gpu{i}_temp_c", "throughput": "gpu{i}_gflops"},
            throughput_unit="GFLOP/s",
        )
        out.append(Case(f"v100/{f.stem}", f, lambda p, o=options: csv_import.read(p, o), "gemm"))
        temp_only = csv_import.CsvOptions(
            time_col="est_elapsed_s_from_gpu0",
            time_unit="s",
            devices=4,
            mapping={"temp_c": "gpu{i}_temp_c"},
        )
        read = lambda p, o=temp_only: csv_import.read(p, o)  # noqa: E731
        out.append(Case(f"v100-temp/{f.stem}", f, read, "gemm"))
    for f in sorted((v100 / "raw").glob("*.zip")):
        out.append(Case(f"v100/{f.stem}", f, gpu_burn.read, "gemm"))
    return out


def _h100(h100: Path) -> list[Case]:
    out: list[Case] = []
    for f in sorted(h100.glob("*.csv")):
        options = h100_csv_options()
        out.append(Case(f"h100/{f.stem}", f, lambda p, o=options: csv_import.read(p, o), "train"))
    return out


def _b200(b200: Path) -> list[Case]:
    out: list[Case] = []
    for session, rate_col, unit in (
        ("0107-default", "gpu_gflops", "GFLOP/s"),
        ("0108-log-d", "gpu_tflops", "TFLOP/s"),
    ):
        for f in sorted((b200 / session).glob("*.csv")):
            options = csv_import.CsvOptions(
                time_col="timestamp",
                time_unit="iso",
                device_col="gpu_id",
                mapping={
                    "temp_c": "gpu_temp_c",
                    "power_w": "gpu_power_w",
                    "util_pct": "gpu_util_pct",
                    "throughput": rate_col,
                },
                throughput_unit=unit,
            )
            out.append(
                Case(f"b200/{f.stem}", f, lambda p, o=options: csv_import.read(p, o), "gemm")
            )
    for f in sorted((b200 / "dcgmproftester-tc-0109").glob("b200_tensor_test_2*.csv")):
        options = csv_import.CsvOptions(
            time_col="elapsed_sec",
            time_unit="s",
            device_col="gpu_id",
            mapping={
                "temp_c": "gpu_temp_c",
                "power_w": "gpu_power_w",
                "power_limit_w": "gpu_power_limit_w",
                "util_pct": "gpu_util_pct",
            },
        )
        out.append(Case(f"b200/{f.stem}", f, lambda p, o=options: csv_import.read(p, o), "gemm"))
    return out


# each trace folder with a time axis (testkit.traces finds it), and how to read its files
SOURCES: dict[str, Callable[[Path], list[Case]]] = {
    "v100x4-gpuburn-18h-lambda": _v100,
    "h100x8-nanogpt-powercap-voltagepark": _h100,
    "b200x8-gpuburn-powerlimit-sweep": _b200,
}
# the folders that do not travel with soak, and why (bench/data/real-traces/README.md)
NOT_SHIPPED = {
    "b200x8-gpuburn-powerlimit-sweep": "its repository (hsucs2712/gpuburntool) shows no "
    "licence, so it is not redistributed",
}
NO_TIME_AXIS = {"v100-sc22-sgemm-per-gpu-aggregate": "per-run medians, no time axis"}


def cases() -> tuple[list[Case], dict[str, str]]:
    """The cases of every trace found on this machine, and each missing trace with why."""
    out: list[Case] = []
    missing: dict[str, str] = {}
    for name, read in SOURCES.items():
        folder = trace_dir(name)
        if folder is None:
            why = NOT_SHIPPED.get(name)
            missing[name] = f"{why}; {missing_reason(name)}" if why else missing_reason(name)
            continue
        out += read(folder)
    return out, missing


@dataclass
class Row:
    trace: str
    device: int
    ref_min: float | None
    eq_min: float | None
    verdict: str
    diagnosis: str
    note: str
    stop_min: float | None = None  # where --until-steady's sequential stop would have fallen
    stop_verdict: str | None = None  # the device's verdict on the data up to the stop
    window_s: float | None = None  # the windows it was judged on (equilibrium rule, line 16)

    @property
    def delay_min(self) -> float | None:
        if self.ref_min is None or self.eq_min is None:
            return None
        return self.eq_min - self.ref_min


def run_case(
    case: Case, out: Path, configs: tuple[tuple[str, ...], ...] = ((),)
) -> tuple[dict[tuple[str, ...], list[Row]], float]:
    """The case imported once and analysed with each configuration's clauses off."""
    began = time.perf_counter()
    trace = case.read(case.path)
    options = ImportOptions(
        workload=case.workload,
        host=case.name.replace("/", "_"),
        out=out,
        tags={},
        command=f"bench/real_traces.py {case.path.name}",
    )
    result = write_run(trace, describe(case.path, trace.format), options)
    store = RunStore.open(result.run_dir)
    try:
        data = RunData.from_store(store)
    finally:
        store.close_read()
    rows = {}
    profile = load_profile(None)
    for off in configs:
        with clauses_off(*off):
            analysis = analyze_run(data, profile)
            stop = replay(data, profile, analysis)
            stop_s = None if stop is None else stop.t_s
            short = None if stop_s is None else analyze_run(truncated(data, stop_s), profile)
            rows[off] = _rows(case, data, result, analysis, stop_s, short)
    return rows, time.perf_counter() - began


def _rows(
    case: Case, data: RunData, result, analysis, stop_s: float | None, short=None
) -> list[Row]:
    rows = []
    at_stop = {} if short is None else {d.index: d.verdict for d in short.devices}
    for d in analysis.devices:
        start = d.load_start_s if d.load_start_s is not None else result.segment.start_s
        end = d.end_s if d.end_s is not None else result.segment.end_s
        tele = data.telemetry[d.index]
        rate_t = rate = None
        work = data.work.get(d.index, {}).get(case.workload)
        if work is not None and work["t_end_s"].size:
            rate_t = work["t_end_s"]
            rate = work["work"] / (work["t_end_s"] - work["t_start_s"])
        ref = reference_time(start, end, tele["t_s"], tele["temp_c"], rate_t, rate)
        eq = d.facts.equilibrium
        eq_s = eq.time_s if eq is not None and eq.reached else None
        note = "" if eq_s is not None else "equilibrium not reached"
        rows.append(
            Row(
                case.name,
                d.index,
                None if ref is None else (ref - start) / 60,
                None if eq_s is None else (eq_s - start) / 60,
                d.verdict,
                d.diagnosis,
                note,
                None if stop_s is None else (stop_s - start) / 60,
                at_stop.get(d.index),
                None if eq is None or eq.scale is None else eq.scale.window_s,
            )
        )
    return rows


H200_RECORDING = ROOT / "tests" / "fixtures" / "gpu" / "h200-2026-12-04" / "mix.sqlite"


def h200_recording(out: Path, off: tuple[str, ...] = ()) -> list[Row]:
    """The H200 recording (11 min of ``mix`` from a cold card, 2026-12-04): a soak's own
    store, analysed and replayed as an imported trace is. Its reference's last 30 min are
    its whole load (``reference_time`` clips them)."""
    run_dir = out / "h200-2026-12-04"
    run_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy(H200_RECORDING, run_dir / STORE_NAME)
    store = RunStore.open(run_dir)
    try:
        data = RunData.from_store(store)
    finally:
        store.close_read()
    profile = load_profile(None)
    with clauses_off(*off):
        analysis = analyze_run(data, profile)
        stop = replay(data, profile, analysis)
        stop_s = None if stop is None else stop.t_s
        short = None if stop_s is None else analyze_run(truncated(data, stop_s), profile)
    case = Case("h200-2026-12-04/mix", H200_RECORDING, _no_reader, "mix")
    return _rows(case, data, None, analysis, stop_s, short)


def _no_reader(path: Path) -> Trace:
    raise TypeError(f"{path} is a soak store, not a trace to import")


def _fmt(value: float | None, spec: str = "6.1f") -> str:
    return f"{value:{spec}}" if value is not None and math.isfinite(value) else "     –"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="only traces whose name holds this (default: all)")
    parser.add_argument(
        "--traces",
        type=Path,
        help="another folder of traces, looked in before bench/data/real-traces/ "
        "(default: $SOAK_REAL_TRACES)",
    )
    parser.add_argument("--keep", type=Path, help="keep the run folders here (default: none)")
    parser.add_argument(
        "--without",
        action="append",
        default=[],
        choices=CLAUSE_NAMES,
        help="also analyse with this clause of the rule off (repeatable)",
    )
    args = parser.parse_args(argv)
    if args.traces is not None:
        os.environ["SOAK_REAL_TRACES"] = str(args.traces)
    for name, why in NO_TIME_AXIS.items():
        print(f"skipped: {name} ({why})")
    found, missing = cases()
    for name, why in missing.items():
        print(f"missing: {name}: {why}")
    configs = ((), *((name,) for name in dict.fromkeys(args.without)))
    out = args.keep or Path(tempfile.mkdtemp(prefix="soak-real-traces-"))
    rows: dict[tuple[str, ...], list[Row]] = {c: [] for c in configs}
    seconds: dict[str, float] = {}
    try:
        for case in found:
            if args.only and args.only not in case.name:
                continue
            case_rows, took = run_case(case, out, configs)
            for config, more in case_rows.items():
                rows[config] += more
            seconds[case.name] = took
        if H200_RECORDING.exists() and (not args.only or args.only in "h200-2026-12-04/mix"):
            began = time.perf_counter()
            for config in configs:
                rows[config] += h200_recording(out, config)
            seconds["h200-2026-12-04/mix"] = time.perf_counter() - began
    finally:
        if args.keep is None:
            shutil.rmtree(out, ignore_errors=True)
    _table(rows[()])
    summary = _summary(rows[()], seconds)
    summary["missing"] = sorted(missing)
    summary["traces"] = _per_trace(rows[()])
    if len(configs) > 1:
        summary["without"] = _side_by_side(rows, seconds)
    print(json.dumps(summary, sort_keys=True))
    return 0


def _table(rows: list[Row]) -> None:
    print(
        f"{'trace':48} dev  ref min  soak min  delay min  W min  stop min  stop-ref  verdict  "
        "at stop  diagnosis"
    )
    for r in rows:
        after = None if r.stop_min is None or r.ref_min is None else r.stop_min - r.ref_min
        w = None if r.window_s is None else r.window_s / 60
        print(
            f"{r.trace:48} {r.device:3}  {_fmt(r.ref_min, '7.1f')}  {_fmt(r.eq_min, '8.1f')}  "
            f"{_fmt(r.delay_min, '9.1f')}  {_fmt(w, '5.1f')}  {_fmt(r.stop_min, '8.1f')}  "
            f"{_fmt(after, '8.1f')}  {r.verdict:7}  {r.stop_verdict or '–':7}  {r.diagnosis}"
            + (f"  ({r.note})" if r.note else "")
        )
    traces = _per_trace(rows)
    print(f"\n{'trace':48} devices  latest ref min  stop min  stop − latest ref  verdict = whole's")
    for name, t in traces.items():
        print(
            f"{name:48} {t['devices']:7}  {_fmt(t['latest_ref_min'], '14.1f')}  "
            f"{_fmt(t['stop_min'], '8.1f')}  {_fmt(t['stop_after_latest_ref_min'], '17.1f')}  "
            f"{t['verdict_at_stop_equal'] if t['stop_min'] is not None else '–'}"
        )


def _per_trace(rows: list[Row]) -> dict[str, dict]:
    """Per trace (its devices share one stop): the stop − the latest device's reference
    (None where some device has no reference, or no stop fell), and whether every device's
    verdict at the stop is the whole trace's."""
    out: dict[str, dict] = {}
    for name in dict.fromkeys(r.trace for r in rows):
        group = [r for r in rows if r.trace == name]
        refs = [r.ref_min for r in group]
        latest = None if any(x is None for x in refs) else max(refs)  # type: ignore[type-var]
        stop = group[0].stop_min
        out[name] = {
            "devices": len(group),
            "latest_ref_min": latest,
            "stop_min": stop,
            "stop_after_latest_ref_min": None
            if stop is None or latest is None
            else round(stop - latest, 2),
            "verdict_at_stop_equal": None
            if stop is None
            else all(r.stop_verdict == r.verdict for r in group),
        }
    return out


def _side_by_side(
    rows: dict[tuple[str, ...], list[Row]], seconds: dict[str, float]
) -> dict[str, object]:
    """Each device's delay (min; "–" not reached; a verdict other than with every clause
    on is added) with every clause on and with each clause off, then each group's summary
    for each."""
    offs = [c for c in rows if c]
    names = [c[0] for c in offs]
    print(f"\ndelay (min) with each clause off\n{'trace':40} dev {'on':>7}", end="")
    print("".join(f" {n + ' off':>15}" for n in names))
    for k, on in enumerate(rows[()]):
        cells = []
        for off in offs:
            r = rows[off][k]
            verdict = "" if r.verdict == on.verdict else f" {r.verdict}"
            cells.append(f" {_fmt(r.delay_min, '7.1f') + verdict:>15}")
        print(f"{on.trace:40} {on.device:3} {_fmt(on.delay_min, '7.1f')}" + "".join(cells))
    out: dict[str, object] = {}
    keys = ("within_contract", "early", "late", "equilibrium_reached", "median_delay_min")
    print(f"\n{'group':12} {'clauses':>18} " + " ".join(f"{k:>19}" for k in keys))
    for config in rows:
        label = f"{config[0]} off" if config else "all on"
        summary = _summary(rows[config], seconds)
        if config:
            out[config[0]] = summary | {"traces": _per_trace(rows[config])}
        for group, figures in summary.items():
            if isinstance(figures, dict):
                print(f"{group:12} {label:>18} " + " ".join(f"{figures[k]!s:>19}" for k in keys))
    return out


def _summary(rows: list[Row], seconds: dict[str, float]) -> dict[str, object]:
    groups: dict[str, list[Row]] = {}
    for r in rows:
        groups.setdefault(r.trace.split("/")[0], []).append(r)
    out: dict[str, object] = {"seconds": round(sum(seconds.values()), 1)}
    for name, group in sorted(groups.items()):
        delays = [r.delay_min for r in group if r.delay_min is not None]
        out[name] = {
            "devices": len(group),
            "with_reference": sum(r.ref_min is not None for r in group),
            "equilibrium_reached": sum(r.eq_min is not None for r in group),
            "both": len(delays),
            "within_contract": sum(EARLY_MIN <= d <= LATE_MIN for d in delays),
            "early": sum(d < EARLY_MIN for d in delays),
            "late": sum(d > LATE_MIN for d in delays),
            "median_delay_min": round(float(np.median(delays)), 2) if delays else None,
            "max_delay_min": round(max(delays), 2) if delays else None,
            "verdicts": {v: sum(r.verdict == v for r in group) for v in ("PASS", "FAIL")},
            "hardware_fault": sum(r.diagnosis == "hardware-fault" for r in group),
            "sequential_stop": sum(r.stop_min is not None for r in group),
            "verdict_at_stop_differs": sum(
                r.stop_verdict is not None and r.stop_verdict != r.verdict for r in group
            ),
            "stop_within_10_min_of_reference": sum(
                r.stop_min is not None and r.ref_min is not None and r.stop_min - r.ref_min <= 10
                for r in group
            ),
        }
    return out


if __name__ == "__main__":
    sys.exit(main())
