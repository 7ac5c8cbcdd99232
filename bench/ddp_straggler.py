"""The simulated ddp soak as a classifier: how often the straggler and sync-retention checks
blame a healthy server, and how close the reported server step-rate loss is to the
simulator's noise-free truth when one device's airflow is blocked.

Healthy: ``--seeds`` (200) 8-GPU H100 ddp runs of ``--minutes`` (20), no fault: counts the
runs with a straggler FAIL (the issue's bar: none) and WARN, and sync-retention FAILs.
Faulted: ``--fault-seeds`` (20) runs with ``airflow:gpu=G:factor=2.6`` on a GPU drawn per
seed: how often G is named the pace setter, how often the server's loss is split as
thermal slowdown of G, and |reported loss - true loss| in percentage points (bar: within 1).
Healthy runs also give the share of their loss the split puts on power-capped drift.
Each run writes its store under a temporary folder, as soak does.
Prints a table and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from soak.config import RunConfig
from soak.pipeline import analyze
from soak.profile import load_profile
from soak.runner import run
from soak.store import RunStore


def one(seed: int, minutes: float, faults: tuple[str, ...]):
    loads = []
    with tempfile.TemporaryDirectory() as out:
        config = RunConfig(
            backend="sim",
            workload="ddp",
            duration_s=minutes * 60,
            baseline_s=0.0,
            seed=seed,
            sim_faults=faults,
            out=Path(out),
        )
        result = run(config, on_tick=lambda r, _p: loads or loads.append(r.load))
        store = RunStore.open(result.run_dir)
        analysis = analyze(store, load_profile(None))
        store.close_read()
    sync, sim = analysis.sync, loads[0].sync
    cold = sim.truth_rate(sync.cold_window.start_s, sync.cold_window.end_s)
    steady = sim.truth_rate(sync.steady_window.start_s, sync.steady_window.end_s)
    statuses = {c.check: c.status.value for c in analysis.checks if c.check in NAMES}
    return sync, 1.0 - steady / cold, statuses


NAMES = ("straggler", "sync_retention")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=200, help="healthy runs (default 200)")
    parser.add_argument("--fault-seeds", type=int, default=20, help="faulted runs (default 20)")
    parser.add_argument("--minutes", type=float, default=20.0, help="run length (default 20)")
    args = parser.parse_args()
    healthy = {"straggler fail": 0, "straggler warn": 0, "sync_retention fail": 0}
    drift_shares = []
    for seed in range(args.seeds):
        sync, _, statuses = one(seed, args.minutes, ())
        for name, status in statuses.items():
            key = f"{name} {status}"
            if key in healthy:
                healthy[key] += 1
        if sync.split is not None and sync.loss and sync.loss > 0:
            drift_shares.append(sync.split.split.drift / sync.loss)
    named, thermal, errors = 0, 0, []
    draw = random.Random(0)
    for seed in range(args.fault_seeds):
        gpu = draw.randrange(8)
        sync, truth, _ = one(1000 + seed, args.minutes, (f"airflow:gpu={gpu}:factor=2.6",))
        named += sync.pace_setter == gpu
        split = sync.split
        thermal += split is not None and split.device == gpu and split.split.thermal > 0
        errors.append(abs(sync.loss - truth) * 100)
    print(f"healthy 8-GPU ddp runs of {args.minutes:g} min: {args.seeds}")
    for key, count in healthy.items():
        print(f"  {key:<22} {count:>4}")
    if drift_shares:
        mean = sum(drift_shares) / len(drift_shares) * 100
        least = min(drift_shares) * 100
        print(f"  loss put on power-capped drift: mean {mean:.0f} %, min {least:.0f} %")
    print(f"airflow-faulted runs: {args.fault_seeds}")
    print(f"  faulted GPU named pace setter {named:>4}")
    print(f"  loss split as its thermal     {thermal:>4}")
    if errors:
        print(f"  |loss - truth| max {max(errors):.2f} pp, mean {sum(errors) / len(errors):.2f} pp")
    result = {
        "minutes": args.minutes,
        "healthy_runs": args.seeds,
        **{k.replace(" ", "_"): v for k, v in healthy.items()},
        "fault_runs": args.fault_seeds,
        "drift_share_mean": sum(drift_shares) / len(drift_shares) if drift_shares else None,
        "fault_named": named,
        "fault_thermal_split": thermal,
        "loss_error_pp_max": max(errors) if errors else None,
        "loss_error_pp_mean": sum(errors) / len(errors) if errors else None,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
