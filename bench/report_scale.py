"""How long the report takes for a big run, and how much memory: 8 devices at 1-second
ticks for 24 hours, and for a week side by side (issue 42).

Synthesises the run store directly (much faster than running the simulated server for a
day or a week): a thermal rise to equilibrium with the SW power cap set, sensor noise and
quantising, three parts of mixed work per device and second, one device that never settles
(the equilibrium search runs to the end of the run: the analysis's worst case), a 3-second
HW slowdown on another, an ECC error and a warning every quarter hour, written an hour at a
time with ``RunStore.append_block``. Then ``build_outputs`` (the analysis, summary.json,
junit.xml and report.html, exactly what `soak report` does) runs in a child process, so that
its peak memory (VmHWM) is its own.

``--hours 24 168`` measures each length; ``--against DIR`` (another checkout of soak, e.g.
main) runs both checkouts on the same stores in turn, ``--rounds`` times each, alternating,
so that the machine's load falls on both alike, and says whether they wrote the same bytes.
Limits: 24 hours (issue 6) under 30 s, 2 GiB and a 10-MB report.html; a week (issue 42)
under 60 s and 512 MiB; the peak of 24 hours within 10 % of the week's is reported, not
enforced. Prints a table and one JSON line; exits 1 when this checkout exceeds a limit.
``--gpus`` changes the size; ``--stores DIR`` keeps (or reuses) the synthesised run folders.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from soak.dataset import WorkColumns
from soak.model import (
    TELEMETRY_FIELDS,
    Capability,
    ClockReason,
    DeviceInfo,
    Event,
    EventKind,
    StopReason,
)
from soak.profile import Profile
from soak.record import RunRecord, StopRecord
from soak.store import STORE_NAME, RunStore

ROOT = Path(__file__).resolve().parent.parent
LIMITS = {24.0: (30.0, 2048.0), 168.0: (60.0, 512.0)}  # hours -> (s, MiB)
LIMIT_HTML_MB = 10.0
FLAT = 0.10  # the 24-hour peak within this share of the week's: memory flat in run length
BASELINE_S = 10
CHUNK_S = 3600  # ticks appended per block write
NOTE_S = 900  # a warning event each quarter of an hour
PARTS = (("gemm", "FLOP", 3.4e14), ("membw", "B", 6.0e11), ("train", "token", 1.5e4))

CHILD = """
import hashlib, json, sys, time
from pathlib import Path
def hwm():  # this process's peak RSS (ru_maxrss keeps the parent's over exec)
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
t, cpu = time.perf_counter(), time.process_time()
try:
    from soak.pipeline import build_outputs
except ImportError:  # a checkout before the pipeline had a module of its own
    from soak.report import build_outputs
run = Path(sys.argv[1])
analysis, report = build_outputs(run)
wall, cpu = time.perf_counter() - t, time.process_time() - cpu
digest = hashlib.sha256(b"".join((run / n).read_bytes() for n in
    ("summary.json", "junit.xml", "report.html"))).hexdigest()[:12]
print(json.dumps({"wall_s": wall, "cpu_s": cpu, "peak_rss_mib": hwm(),
                  "verdict": str(analysis.verdict), "outputs": digest}))
"""


def device_series(i: int, t: np.ndarray, n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """One device's telemetry columns at the ticks ``t`` of a run of ``n`` ticks (the first
    BASELINE_S idle): a thermal rise to equilibrium with the SW power cap set, sensor noise
    and whole degrees, clocks in 15-MHz steps; device 5 never settles, device 2 has three
    seconds of HW slowdown halfway, device 4 an uncorrected ECC error a third of the way."""
    size = t.size
    load = np.clip(t - BASELINE_S, 0, None)
    settle = 300.0 + 40 * i
    t_inf = 66.0 + 3 * i
    temp = 30 + (t_inf - 30) * (1 - np.exp(-load / settle))
    if i == 5:  # never settles: a slow drift all day
        temp = temp + load / 86400 * 6
    temp = np.round(temp + rng.normal(0, 0.2, size))
    clock = np.where(load > 0, 1980 - 6 * (temp - 30), 345.0)
    clock = np.round(clock / 15) * 15
    slow = (t >= n // 2) & (t < n // 2 + 3)
    if i == 2:
        clock[slow] /= 2
    power = np.where(load > 0, 700 - rng.gamma(2, 1.5, size), 70.0)
    reasons = np.where(load > 0, int(ClockReason.SW_POWER_CAP), int(ClockReason.GPU_IDLE))
    if i == 2:
        reasons[slow] |= int(ClockReason.HW_SLOWDOWN)
    ecc = np.where(t >= n // 3, 1.0, 0.0) if i == 4 else np.zeros(size)
    return {
        "t_s": t,
        "temp_c": temp,
        "mem_temp_c": temp - 1,
        "sm_clock_mhz": clock,
        "mem_clock_mhz": np.full(size, 2619.0),
        "power_w": power,
        "power_limit_w": np.full(size, 700.0),
        "energy_j": 2.8e8 + 700.0 * t,  # a counter that moves (an exact sum over a block)
        "util_pct": np.where(load > 0, 100.0, 0.0),
        "mem_util_pct": np.where(load > 0, 60.0, 0.0),
        "clock_reasons": reasons.astype(float),
        "ecc_uncorrected": ecc,
        "ecc_corrected": np.zeros(size),
        "remap_pending": ecc.copy(),
        "remap_failure": np.zeros(size),
        "pcie_replay": np.zeros(size),
        "power_violation_s": np.cumsum(load > 0).astype(float),  # from the block's start
        "thermal_violation_s": np.zeros(size),
    }


def synthesise(run_dir: Path, hours: float, gpus: int) -> None:
    """The run's store, written an hour at a time with ``RunStore.append_block`` (as a
    simulator stepped in blocks writes it), so that a week of 8 devices takes a minute or
    two, not the hours of one ``append`` a tick."""
    n = int(hours * 3600) + BASELINE_S
    store = RunStore.create(run_dir / STORE_NAME)
    profile = Profile()
    store.set_meta(
        run=RunRecord(
            backend="sim",
            workload="mix",
            started_utc="2026-11-30T00:00:00Z",
            seed=1,
            command=f"python bench/report_scale.py --hours {hours:g} --gpus {gpus}",
            host="bench",
            interval_s=1.0,
        ).to_json(),
        host={"hostname": "bench", "cpu": "synthetic", "os": "synthetic"},
        profile=profile.as_dict(),
        load_start_s=float(BASELINE_S),
    )
    store.add_devices(
        DeviceInfo(
            index=i,
            backend="sim",
            name="NVIDIA H100 80GB HBM3 (synthetic)",
            uuid=f"GPU-bench-{i:04d}",
            serial=f"BENCH{i:04d}",
            pci_bus_id=f"00000000:{0x18 + 0x10 * i:02X}:00.0",
            power_limit_w=700.0,
            slowdown_temp_c=89.0,
        )
        for i in range(gpus)
    )
    store.add_capabilities(
        {
            i: {
                m: Capability.NOT_SUPPORTED if m in ("fan_pct", "retired_pages") else "supported"
                for m in TELEMETRY_FIELDS[2:]
            }
            for i in range(gpus)
        }
    )
    events = [Event(0.0, EventKind.RUN_START, f"{gpus} device(s), synthetic")]
    events += [Event(float(BASELINE_S), EventKind.LOAD_START, "load mix started")]
    violation = np.zeros(gpus)  # power_violation_s carried from one hour to the next
    for start in range(0, n, CHUNK_S):
        end = min(start + CHUNK_S, n)
        t = np.arange(start, end, dtype=float)
        telemetry = {}
        work = []
        for i in range(gpus):
            series = device_series(i, t, n, np.random.default_rng((1, i, start)))
            series["power_violation_s"] = series["power_violation_s"] + violation[i]
            violation[i] = series["power_violation_s"][-1]
            telemetry[i] = series
            loaded = t >= BASELINE_S
            clock = series["sm_clock_mhz"][loaded]
            done = t[loaded]
            for part, unit, rate in PARTS:
                work.append(WorkColumns(i, part, unit, done, done + 1, rate * clock / 1650))
        notes = [
            Event(float(s), EventKind.WARNING, "synthetic note")
            for s in range(max(start, NOTE_S), end, NOTE_S)
        ]
        store.append_block(
            telemetry=telemetry, work=work, events=(events if start == 0 else []) + notes
        )
    stop_events = [
        Event(float(n), EventKind.WORKER_OUTCOME, "load ended: ok", i, {"outcome": "ok"})
        for i in range(gpus)
    ]
    store.append(events=stop_events)
    stop = StopRecord(StopReason.DURATION, load_stop_s=float(n), duration_s=float(n - BASELINE_S))
    store.set_meta(stop=stop.to_json())
    store.close()


def report(checkout: Path, run_dir: Path) -> dict:
    """``build_outputs`` of ``run_dir`` by ``checkout``'s soak, in a child process."""
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(run_dir)],
        capture_output=True,
        text=True,
        check=True,
        cwd=checkout,
        env={**os.environ, "PYTHONPATH": str(checkout)},
    )
    return json.loads(child.stdout.strip().splitlines()[-1])


def measure(
    checkouts: dict[str, Path], hours: list[float], gpus: int, stores: Path, rounds: int
) -> list[dict]:
    """Each store (synthesised once) reported by each checkout in turn, ``rounds`` times:
    the median wall and CPU time, the highest peak."""
    out = []
    for h in hours:
        run_dir = stores / f"{gpus}x{h:g}h"
        synth_s = None
        if not (run_dir / STORE_NAME).exists():
            run_dir.mkdir(parents=True, exist_ok=True)
            start = time.perf_counter()
            synthesise(run_dir, h, gpus)
            synth_s = time.perf_counter() - start
        runs: dict[str, list[dict]] = {name: [] for name in checkouts}
        for _ in range(rounds):
            for name, checkout in checkouts.items():
                runs[name].append(report(checkout, run_dir))
        for name, done in runs.items():
            out.append(
                {
                    "checkout": name,
                    "hours": h,
                    "gpus": gpus,
                    "wall_s": statistics.median(r["wall_s"] for r in done),
                    "cpu_s": statistics.median(r["cpu_s"] for r in done),
                    "peak_rss_mib": max(r["peak_rss_mib"] for r in done),
                    "verdict": done[-1]["verdict"],
                    "outputs": done[-1]["outputs"],
                    "store_mb": (run_dir / STORE_NAME).stat().st_size / 1e6,
                    "html_mb": (run_dir / "report.html").stat().st_size / 1e6,
                    "synthesise_s": synth_s,
                }
            )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hours", type=float, nargs="+", default=[24.0])
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--against", type=Path, help="another checkout, run in turn with this")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--stores", type=Path, help="keep (or reuse) the run folders here")
    args = parser.parse_args()
    checkouts = {"this": ROOT}
    if args.against is not None:
        checkouts = {"against": args.against.resolve(), "this": ROOT}
    with tempfile.TemporaryDirectory() as tmp:
        rows = measure(checkouts, args.hours, args.gpus, args.stores or Path(tmp), args.rounds)
    ok = True
    print(
        f"{'run':>14} {'checkout':>8} {'wall s':>7} {'cpu s':>7} {'peak MiB':>9} "
        f"{'html MB':>8} {'store MB':>9} {'verdict':>10} {'outputs':>13}  limits"
    )
    for r in rows:
        limit_s, limit_mib = LIMITS.get(r["hours"], (math.inf, math.inf))
        within = (
            r["wall_s"] < limit_s and r["peak_rss_mib"] < limit_mib and r["html_mb"] < LIMIT_HTML_MB
        )
        if r["checkout"] == "this":
            ok &= within
        limits = f"< {limit_s:.0f} s, < {limit_mib:.0f} MiB" if math.isfinite(limit_s) else ""
        print(
            f"{r['gpus']:>3} × {r['hours']:>5g} h {r['checkout']:>8} {r['wall_s']:>7.1f} "
            f"{r['cpu_s']:>7.1f} {r['peak_rss_mib']:>9.0f} {r['html_mb']:>8.2f} "
            f"{r['store_mb']:>9.1f} {r['verdict']:>10} {r['outputs']:>13}  "
            f"{limits}{'' if within or not limits else ': OVER'}"
        )
    for name in checkouts:
        peaks = {r["hours"]: r["peak_rss_mib"] for r in rows if r["checkout"] == name}
        if 24.0 in peaks and 168.0 in peaks:
            flat = peaks[24.0] >= (1 - FLAT) * peaks[168.0]
            print(
                f"{name}: the 24-h peak is {peaks[24.0] / peaks[168.0]:.0%} of the week's "
                f"({'within' if flat else 'not within'} {FLAT:.0%})"
            )
    print("within limits" if ok else "OVER A LIMIT")
    print(json.dumps({"bench": "report_scale", "runs": rows, "within_limits": ok}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
