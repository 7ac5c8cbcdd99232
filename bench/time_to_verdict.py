"""How soon ``--until-steady`` stops, and whether its verdict is the hour's.

Each server is simulated once for 60 minutes (``testkit.sim.simulate``: the records a run
would store, without a store); the analysis of the whole hour gives the 60-minute verdict.
The sequential stop is then replayed on the same records (``soak.analysis.decision.replay``:
the look the live runner makes every 30 s, on the data up to that time) and the analysis of
the data up to the stop gives the ``--until-steady`` verdict. A seeded simulation is the
same whatever its length, so the first part of the hour is the short run; the live runner
looks from when its online detector holds every date, the replay from the first time every
date can stand, so the two stops may differ by up to one 30-s look (a slow test runs the
live path against a longer run of the same seed). A run no look decides stops at
``--max-minutes`` (50).

Servers (``--servers``, default 208) cycle through the healthy groups of
``bench/verdict_accuracy.py`` (every SKU at inlets −5, 0, +4, +7 °C, and GEMM alone) and
its fault cases, each server its own seed (``testkit.cases``). Prints the stop-time
distribution of the healthy servers (median, p90), the agreement table (short verdict
against the hour's), every PASS where the hour FAILs (and whether the fault had begun by the
short stop: a fault that starts later cannot count against it), the prediction (the live
view's verdict ETA is replayed at 5 and 10 min of load) against the stop, and one JSON line.
``--jobs`` sets the worker processes (default 2: the machine is shared).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from soak.analysis.analyze import analyze_run
from soak.analysis.decision import replay, truncated
from soak.config import load_profile
from testkit.cases import CASES, HEALTHY, gpu_for, telemetry_timing, timing
from testkit.sim import BASELINE_S, simulate

PROFILE = load_profile(None)
HOUR_S = 3600.0
MAX_S = 3000.0  # --max-minutes' default


def servers(n: int) -> list[tuple[str, int]]:
    """``n`` (scenario, seed) pairs: a healthy group and a fault case in turn, each list
    cycled, every server its own seed (a seed sets the fans' hunt and the noise, which
    set when a device is dated more than the room or the SKU do)."""
    rounds = max(len(HEALTHY), len(CASES))
    kinds = [
        kind
        for i in range(rounds)
        for kind in (f"healthy:{i % len(HEALTHY)}", f"fault:{i % len(CASES)}")
    ]
    return [(kinds[k % len(kinds)], 1000 + k) for k in range(n)]


def _scenario(kind: str, seed: int) -> dict:
    """The simulation's arguments and, for a fault, where and when it starts."""
    group, index = kind.split(":")
    if group == "healthy":
        h = HEALTHY[int(index)]
        return {"label": h.label, "sku": h.sku, "workload": h.workload, "faults": h.faults}
    case = CASES[int(index)]
    at, length = (telemetry_timing if case.named else timing)(seed, HOUR_S)
    gpu = gpu_for(seed, 8)
    spec = case.spec.format(gpu=gpu, at=at, **{"for": length})
    timed = "{at}" in case.spec
    return {
        "label": case.label,
        "sku": "h100-sxm",
        "workload": "mix",
        "faults": (spec,),
        "fault_at_s": BASELINE_S + at if timed else 0.0,
    }


def job(args: tuple[str, int]) -> dict:
    kind, seed = args
    sc = _scenario(kind, seed)
    run = simulate(
        seed=seed, faults=sc["faults"], sku=sc["sku"], workload=sc["workload"], duration_s=HOUR_S
    )
    hour = analyze_run(run.data, PROFILE)
    found = replay(run.data, PROFILE, hour)
    load_start = run.data.meta.load_start_s or BASELINE_S
    stop_t = found.t_s if found is not None else load_start + 1.0 + MAX_S
    short = analyze_run(truncated(run.data, stop_t), PROFILE)
    closest = found.closest if found is not None else None
    return {
        "kind": kind.split(":")[0],
        "label": sc["label"],
        "seed": seed,
        "decided": found is not None,
        "stop_min": (stop_t - load_start) / 60,
        "hour": str(hour.verdict),
        "short": str(short.verdict),
        "fault_at_min": None if "fault_at_s" not in sc else (sc["fault_at_s"] - load_start) / 60,
        "eq_last_min": _last_date(hour, load_start),
        "closest": closest.describe() if closest is not None else None,
    }


def _last_date(analysis, load_start: float) -> float | None:
    dates = [d.facts.equilibrium.time_s for d in analysis.devices if d.facts.equilibrium]
    if not dates or any(t is None for t in dates):
        return None
    return (max(dates) - load_start) / 60


def _q(values: list[float], q: float) -> float | None:
    return float(np.quantile(values, q)) if values else None


def summarise(results: list[dict]) -> dict:
    healthy = [r for r in results if r["kind"] == "healthy"]
    stops = [r["stop_min"] for r in healthy]
    table = Counter((r["hour"], r["short"]) for r in results)
    agree = sum(n for (a, b), n in table.items() if a == b)
    false_pass = [
        r | {"fault_begun": r["fault_at_min"] is None or r["fault_at_min"] <= r["stop_min"]}
        for r in results
        if r["short"] == "PASS" and r["hour"] == "FAIL"
    ]
    return {
        "servers": len(results),
        "healthy": len(healthy),
        "healthy_stop_median_min": _q(stops, 0.5),
        "healthy_stop_p90_min": _q(stops, 0.9),
        "healthy_last_date_median_min": _q(
            [r["eq_last_min"] for r in healthy if r["eq_last_min"] is not None], 0.5
        ),
        "undecided_at_limit": sum(not r["decided"] for r in results),
        "agreement": agree / len(results) if results else None,
        "table": {f"{a} -> {b}": n for (a, b), n in sorted(table.items())},
        "pass_where_hour_fails": false_pass,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", type=int, default=208, help="servers to run (default 208)")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    with ProcessPoolExecutor(args.jobs) as pool:
        results = list(pool.map(job, servers(args.servers)))
    report = summarise(results)
    report["wall_s"] = round(time.perf_counter() - started, 1)
    for r in results:
        print(
            f"{r['label']:<40} seed {r['seed']}: stop {r['stop_min']:5.1f} min "
            f"(last date {r['eq_last_min'] or float('nan'):5.1f}) "
            f"{r['short']:<10} hour {r['hour']:<10}{'' if r['decided'] else ' undecided at limit'}"
        )
    print(f"healthy stop: median {report['healthy_stop_median_min']} min, p90 "
          f"{report['healthy_stop_p90_min']} min over {report['healthy']} servers")  # fmt: skip
    print("agreement (hour -> until-steady):", report["table"], f"= {report['agreement']}")
    for r in report["pass_where_hour_fails"]:
        begun = "begun before the stop" if r["fault_begun"] else "starts after the stop"
        print(f"PASS where the hour FAILs: {r['label']} seed {r['seed']} ({begun})")
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
