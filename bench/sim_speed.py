"""How fast and how lean the simulated server runs: 8 GPUs for 2 hours, a day and a week
at 1-second ticks, sim and report.

Each size runs in its own process, so that its peak memory is its own: the coordinator's
memory (VmRSS) is read at every simulated hour through a display hook, so the table shows
whether memory stays flat while the soak goes on (the series live in the store, not in the
coordinator); the report (``soak report``'s analysis, summary and HTML) follows in a child
process of its own (``report_scale.report``), timed, with its own peak RSS (VmHWM). Wall and
CPU seconds are shown: on a shared machine CPU seconds are the steadier figure. Prints a
table and one JSON line.

``python bench/sim_speed.py [HOURS ...]`` (default 2 24 168: the week is the soak a
coordinator must hold flat; each run's RSS at hour 24 and at its last hour are printed
under the table, and the report's peak of 24 hours against the week's: issue 42 asks
within 10 %).
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from report_scale import FLAT, ROOT
from report_scale import report as report_in_child

from soak.config import RunConfig
from soak.progress import Progress
from soak.runner import run
from soak.store import RunStore


def rss_mib() -> float:
    """This process's resident memory now (Linux ``/proc/self/status``)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


class HourlyRss:
    """A watcher that records VmRSS once per simulated hour of the run."""

    def __init__(self, every_s: float = 3600.0) -> None:
        self.every_s = every_s
        self.by_hour: dict[int, float] = {}

    def update(self, progress: Progress) -> None:
        hour = int(progress.t_s // self.every_s)
        if hour not in self.by_hour:
            self.by_hour[hour] = rss_mib()

    def close(self) -> None:
        pass


def one(hours: float, gpus: int, out: Path) -> dict:
    config = RunConfig(
        backend="sim", workload="mix", duration_s=hours * 3600, seed=1, out=out, sim_gpus=gpus
    )
    probe = HourlyRss()
    start, cpu = time.perf_counter(), time.process_time()
    result = run(config, watchers=[probe])
    wall, sim_cpu = time.perf_counter() - start, time.process_time() - cpu
    store = RunStore.open(result.run_dir)
    rows = store.telemetry_rows()
    store.close_read()
    size = sum(p.stat().st_size for p in result.run_dir.glob("soak.sqlite*"))
    reported = report_in_child(ROOT, result.run_dir)  # its own process: its own peak
    rss = probe.by_hour
    return {
        "hours": hours,
        "gpus": gpus,
        "wall_s": wall,
        "cpu_s": sim_cpu,
        "report_wall_s": reported["wall_s"],
        "report_cpu_s": reported["cpu_s"],
        "report_peak_rss_mib": reported["peak_rss_mib"],
        "ticks": rows // gpus,
        "us_per_tick": 1e6 * wall / (rows // gpus),
        "store_mib": size / 2**20,
        "rss_mib_by_hour": {str(h): round(v, 1) for h, v in sorted(rss.items())},
        "rss_sim_peak_mib": max(rss.values()),
        "rss_growth_after_hour_1_mib": max(rss.values()) - rss.get(1, rss[0]),
        "rss_peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,  # the sim's
    }


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--one":
        with tempfile.TemporaryDirectory() as tmp:
            print(json.dumps(one(float(sys.argv[2]), 8, Path(tmp))))
        return
    sizes = [float(h) for h in sys.argv[1:]] or [2.0, 24.0, 168.0]
    rows = []
    for hours in sizes:
        done = subprocess.run(
            [sys.executable, __file__, "--one", str(hours)],
            check=True,
            capture_output=True,
            text=True,
        )
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    print(
        f"{'run':>12} {'sim wall s':>10} {'sim cpu s':>9} {'report s':>9} {'rep cpu s':>9} "
        f"{'µs/tick':>8} {'store MiB':>10} {'RSS sim MiB':>12} {'report peak MiB':>16}"
    )
    for r in rows:
        print(
            f"{r['hours']:>5.0f} h × {r['gpus']} {r['wall_s']:>10.1f} {r['cpu_s']:>9.1f} "
            f"{r['report_wall_s']:>9.1f} {r['report_cpu_s']:>9.1f} {r['us_per_tick']:>8.0f} "
            f"{r['store_mib']:>10.1f} {r['rss_sim_peak_mib']:>12.1f} "
            f"{r['report_peak_rss_mib']:>16.1f}"
        )
    print()
    for r in rows:
        print(_memory(r))
    peaks = {r["hours"]: r["report_peak_rss_mib"] for r in rows}
    if 24.0 in peaks and 168.0 in peaks:
        share = peaks[24.0] / peaks[168.0]
        print(
            f"report peak RSS: 24 h {peaks[24.0]:.0f} MiB, 168 h {peaks[168.0]:.0f} MiB: the "
            f"day's is {share:.0%} of the week's ({'within' if share >= 1 - FLAT else 'not within'}"
            f" {FLAT:.0%})"
        )
    print(json.dumps({"bench": "sim_speed", "runs": rows}))


def _memory(r: dict) -> str:
    """Whether the coordinator's memory grew while the soak went on: its RSS at hour 24
    (or the run's first hour past 1, where shorter) and at its last hour, and the peak."""
    by_hour = {int(h): v for h, v in r["rss_mib_by_hour"].items()}
    last = max(by_hour)
    early = 24 if last > 24 and 24 in by_hour else min((h for h in by_hour if h >= 1), default=0)
    return (
        f"{r['hours']:.0f} h × {r['gpus']}: RSS {by_hour[early]:.0f} MiB at hour {early}, "
        f"{by_hour[last]:.0f} MiB at hour {last}; peak {r['rss_peak_mib']:.0f} MiB; the "
        f"report's {r['report_peak_rss_mib']:.0f} MiB"
    )


if __name__ == "__main__":
    main()
