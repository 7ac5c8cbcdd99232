"""How long the report takes for a big run: 8 devices × 24 hours at 1-second ticks.

Synthesises the run store directly (much faster than running the simulated server for a
day): a thermal rise to equilibrium with the SW power cap set, sensor noise and quantising,
three parts of mixed work per device and second, one device that never settles (the
equilibrium search runs to the end of the run: the analysis's worst case), a 3-second HW
slowdown on another, an ECC error and a few hundred events. Then ``build_outputs`` (the
analysis, summary.json, junit.xml and report.html, exactly what `soak report` does) runs in
a child process, so that its peak memory is its own.

Limits (issue 6): under 30 s, under 2 GiB of memory, and an HTML file under 10 MB. Prints a
table and one JSON line; exits 1 when a limit is exceeded. ``--hours`` and ``--gpus`` change
the size; ``--keep DIR`` keeps the run folder.
"""

from __future__ import annotations

import argparse
import json
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

LIMIT_S, LIMIT_MIB, LIMIT_HTML_MB = 30.0, 2048.0, 10.0
BASELINE_S = 10
CHUNK_S = 3600  # ticks appended per block write
NOTE_S = 900  # a warning event each quarter of an hour
PARTS = (("gemm", "FLOP", 3.4e14), ("membw", "B", 6.0e11), ("train", "token", 1.5e4))

CHILD = """
import json, resource, sys, time
from pathlib import Path
t = time.perf_counter()
from soak.pipeline import build_outputs
analysis, report = build_outputs(Path(sys.argv[1]))
wall = time.perf_counter() - t
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"wall_s": wall, "peak_rss_mib": peak, "verdict": analysis.verdict}))
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--keep", type=Path, help="keep the run folder here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = args.keep or Path(tmp) / "run"
        run_dir.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        synthesise(run_dir, args.hours, args.gpus)
        synth_s = time.perf_counter() - start
        child = subprocess.run(
            [sys.executable, "-c", CHILD, str(run_dir)],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).resolve().parent.parent,
        )
        result = json.loads(child.stdout.strip().splitlines()[-1])
        sizes = {
            name: (run_dir / name).stat().st_size / 1e6
            for name in (STORE_NAME, "report.html", "summary.json", "junit.xml")
        }
    ok = (
        result["wall_s"] < LIMIT_S
        and result["peak_rss_mib"] < LIMIT_MIB
        and sizes["report.html"] < LIMIT_HTML_MB
    )
    rows = [
        ("run", f"{args.gpus} devices × {args.hours:g} h at 1 s", ""),
        ("store (synthesised)", f"{sizes[STORE_NAME]:.0f} MB in {synth_s:.0f} s", ""),
        ("build_outputs wall time", f"{result['wall_s']:.1f} s", f"< {LIMIT_S:.0f} s"),
        ("peak memory (RSS)", f"{result['peak_rss_mib']:.0f} MiB", f"< {LIMIT_MIB:.0f} MiB"),
        ("report.html", f"{sizes['report.html']:.2f} MB", f"< {LIMIT_HTML_MB:.0f} MB"),
        (
            "summary.json, junit.xml",
            f"{sizes['summary.json'] * 1e3:.0f} kB, {sizes['junit.xml'] * 1e3:.0f} kB",
            "",
        ),
        ("verdict", result["verdict"], ""),
    ]
    width = max(len(r[0]) for r in rows)
    for label, value, limit in rows:
        print(f"{label:<{width}}  {value:>28}  {limit}")
    print("within limits" if ok else "OVER A LIMIT")
    print(
        json.dumps(
            {
                "bench": "report_scale",
                "gpus": args.gpus,
                "hours": args.hours,
                "build_s": round(result["wall_s"], 2),
                "peak_rss_mib": round(result["peak_rss_mib"], 1),
                "html_mb": round(sizes["report.html"], 3),
                "store_mb": round(sizes[STORE_NAME], 1),
                "synthesise_s": round(synth_s, 1),
                "within_limits": ok,
            }
        )
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
