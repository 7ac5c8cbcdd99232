"""How fast and how lean the simulated server runs: 8 GPUs for 24 hours at 1-second ticks.

Each run's coordinator memory (VmRSS) is read at every simulated hour through a display
hook, so the table shows whether memory stays flat while the soak goes on (the series live
in the store, not in the coordinator), next to wall time and the store's size on disk.
Prints a table and one JSON line.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

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
    start = time.perf_counter()
    result = run(config, watchers=[probe])
    wall = time.perf_counter() - start
    store = RunStore.open(result.run_dir)
    rows = store.telemetry_rows()
    store.close_read()
    size = sum(p.stat().st_size for p in result.run_dir.glob("soak.sqlite*"))
    rss = probe.by_hour
    return {
        "hours": hours,
        "gpus": gpus,
        "wall_s": wall,
        "ticks": rows // gpus,
        "us_per_tick": 1e6 * wall / (rows // gpus),
        "store_mib": size / 2**20,
        "rss_mib_by_hour": {str(h): round(v, 1) for h, v in sorted(rss.items())},
        "rss_peak_mib": max(rss.values()),
        "rss_growth_after_hour_1_mib": max(rss.values()) - rss.get(1, rss[0]),
    }


def main() -> None:
    hours = float(sys.argv[1]) if len(sys.argv) > 1 else 24.0
    with tempfile.TemporaryDirectory() as tmp:
        rows = [one(2.0, 8, Path(tmp)), one(hours, 8, Path(tmp))]
    print(
        f"{'run':>12} {'wall s':>8} {'µs/tick':>8} {'store MiB':>10} {'RSS peak MiB':>13} "
        f"{'growth after h1':>16}"
    )
    for r in rows:
        print(
            f"{r['hours']:>5.0f} h × {r['gpus']} {r['wall_s']:>8.1f} {r['us_per_tick']:>8.0f} "
            f"{r['store_mib']:>10.1f} {r['rss_peak_mib']:>13.1f} "
            f"{r['rss_growth_after_hour_1_mib']:>16.1f}"
        )
    print(json.dumps({"bench": "sim_speed", "runs": rows}))


if __name__ == "__main__":
    main()
