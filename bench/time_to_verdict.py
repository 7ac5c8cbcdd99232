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
from soak.analysis.decision import replay, truncated, verdict_eta_s
from soak.analysis.equilibrium import CLAUSE_NAMES, OnlineDetector
from soak.dataset import work_rates
from soak.model import EventKind
from soak.profile import load_profile
from soak.runner import PREDICTED_AT_S
from testkit.cases import CASES, HEALTHY, gpu_for, telemetry_timing, timing
from testkit.clauses import clauses_off
from testkit.reference import TEMP_BAND_C, reference_time
from testkit.sim import BASELINE_S, settled_at, simulate

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


def job(args: tuple[str, int, tuple[str, ...]]) -> dict:
    kind, seed, off = args
    with clauses_off(*off):
        return _job(kind, seed)


def _job(kind: str, seed: int) -> dict:
    sc = _scenario(kind, seed)
    run = simulate(
        seed=seed,
        faults=sc["faults"],
        sku=sc["sku"],
        workload=sc["workload"],
        duration_s=HOUR_S,
        truth=True,
    )
    hour = analyze_run(run.data, PROFILE)
    found = replay(run.data, PROFILE, hour)
    load_start = run.data.meta.load_start_s or BASELINE_S
    stop_t = found.t_s if found is not None else load_start + 1.0 + MAX_S
    short = analyze_run(truncated(run.data, stop_t), PROFILE)
    closest = found.closest if found is not None else None
    since = max(d.load_start_s for d in hour.devices if d.load_start_s is not None)
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
        "ref_last_min": _last_reference(run.data, hour, load_start),
        "truth_last_min": _last_truth(run, hour, load_start),
        "sku": sc["sku"],
        "window_s": [
            d.facts.equilibrium.scale.window_s
            for d in hour.devices
            if d.facts.equilibrium is not None and d.facts.equilibrium.scale is not None
        ],
        "confirmed_last_min": _last_confirmed(hour, load_start),
        "closest": closest.describe() if closest is not None else None,
        "stop_load_min": (stop_t - since) / 60,
        "predicted_min": [
            None if p is None else p / 60 for p in predictions(run.data, hour, since)
        ],
        "first_seen_min": _first_seen(run.data, sc, load_start),
    }


def predictions(data, analysis, since: float) -> list[float | None]:
    """The live view's predicted load time of the verdict after each of ``PREDICTED_AT_S``
    of load, as the runner makes it: each device's online detector fed tick by tick (its
    public API) and ``verdict_eta_s``, the latest over the devices."""
    windows = PROFILE.windows
    feeds = {}
    for d in analysis.devices:
        if d.load_start_s is None:
            continue
        detector = OnlineDetector(windows)
        detector.start(d.load_start_s)
        tele = data.telemetry[d.index]
        rates = [(p, work_rates(w)) for p, w in data.work.get(d.index, {}).items()]
        feeds[d.index] = (detector, tele, rates)
    out: list[float | None] = []
    marks = iter(PREDICTED_AT_S)
    mark = next(marks)
    t = since
    while True:
        for detector, tele, rates in feeds.values():
            _feed(detector, tele, rates, t - 1.0, t)
            detector.update(t)
        if t - since >= mark:
            etas = [verdict_eta_s(f[0], t, windows) for f in feeds.values()]
            known = None if any(e is None for e in etas) else max(etas)  # type: ignore[type-var]
            out.append(None if known is None else t - since + known)
            mark = next(marks, None)
            if mark is None:
                return out
        t += 1.0


def _feed(detector: OnlineDetector, tele, rates, after: float, upto: float) -> None:
    """Give the detector the readings and work of (after, upto], as a tick would."""
    rows = (tele.t_s > after) & (tele.t_s <= upto)
    for i in np.flatnonzero(rows):
        values = [tele[k][i] for k in ("temp_c", "power_w", "sm_clock_mhz")]
        detector.add_telemetry(
            float(tele.t_s[i]), *(None if np.isnan(v) else float(v) for v in values)
        )
    for part, r in rates:
        for i in np.flatnonzero((r.t_s > after) & (r.t_s <= upto) & np.isfinite(r.rate)):
            detector.add_rate(part, float(r.t_s[i]), float(r.rate[i]))


def _first_seen(data, scenario: dict, load_start: float) -> float | None:
    """When a fault first showed in the hour's records: its first event on a device
    (verification failed, XID, ECC, protection), minutes of load; None: none there."""
    if "fault_at_s" not in scenario:
        return None
    kinds = {EventKind.VERIFICATION_FAILED, EventKind.XID, EventKind.ECC}
    times = [e.t_s for e in data.events if e.kind in kinds]
    return (min(times) - load_start) / 60 if times else None


def _last_date(analysis, load_start: float) -> float | None:
    dates = [d.facts.equilibrium.time_s for d in analysis.devices if d.facts.equilibrium]
    if not dates or any(t is None for t in dates):
        return None
    return (max(dates) - load_start) / 60


def _last_reference(data, analysis, load_start: float) -> float | None:
    """The latest device's reference equilibrium (``testkit.reference``: the real traces'
    rule, on each device's recorded temperature from its own load start to the end of the
    hour), minutes of the run's load; None where some device has none."""
    refs = []
    for d in analysis.devices:
        if d.load_start_s is None or d.end_s is None:
            continue
        tele = data.telemetry[d.index]
        refs.append(reference_time(d.load_start_s, d.end_s, tele["t_s"], tele["temp_c"]))
    if not refs or any(r is None for r in refs):
        return None
    return (max(refs) - load_start) / 60


def _last_truth(run, analysis, load_start: float) -> float | None:
    """The simulator's own truth beside it: when the latest device's die, hunt included,
    came to stay within the reference's band (1.5 °C) of the band its hunt sweeps."""
    found = []
    for d in analysis.devices:
        if d.load_start_s is None:
            continue
        found.append(settled_at(run.truth_t, run.distance(d.index, hunt=True), TEMP_BAND_C))
    if not found or any(t is None for t in found):
        return None
    return (max(found) - load_start) / 60


def _last_confirmed(analysis, load_start: float) -> float | None:
    """When the hour's last device date was confirmed (the rule's check that counted it)."""
    times = [d.facts.equilibrium.confirmed_s for d in analysis.devices if d.facts.equilibrium]
    if not times or any(t is None for t in times):
        return None
    return (max(times) - load_start) / 60


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
    after = [
        r for r in results if r["fault_at_min"] is not None and r["fault_at_min"] > r["stop_min"]
    ]
    judged = [r for r in results if r not in after]
    errors = [
        [
            (p - r["stop_load_min"]) / r["stop_load_min"] if p is not None else None
            for p in r["predicted_min"]
        ]
        for r in healthy
    ]
    after_ref = [
        r["stop_min"] - r["ref_last_min"] for r in healthy if r["ref_last_min"] is not None
    ]
    after_truth = [
        r["stop_min"] - r["truth_last_min"] for r in healthy if r["truth_last_min"] is not None
    ]
    skus = sorted({r["sku"] for r in healthy})
    return {
        "servers": len(results),
        "healthy": len(healthy),
        "healthy_stop_after_reference_median_min": _q(after_ref, 0.5),
        "healthy_stop_after_reference_p90_min": _q(after_ref, 0.9),
        "healthy_stop_after_reference_max_min": max(after_ref, default=None),
        "healthy_without_reference": len(healthy) - len(after_ref),
        "healthy_stop_after_truth_median_min": _q(after_truth, 0.5),
        "healthy_stop_after_truth_p90_min": _q(after_truth, 0.9),
        "healthy_reference_median_min": _q(
            [r["ref_last_min"] for r in healthy if r["ref_last_min"] is not None], 0.5
        ),
        "healthy_stop_median_min_by_sku": {
            sku: _q([r["stop_min"] for r in healthy if r["sku"] == sku], 0.5) for sku in skus
        },
        "healthy_stop_after_reference_median_min_by_sku": {
            sku: _q(
                [
                    r["stop_min"] - r["ref_last_min"]
                    for r in healthy
                    if r["sku"] == sku and r["ref_last_min"] is not None
                ],
                0.5,
            )
            for sku in skus
        },
        "healthy_stop_median_min": _q(stops, 0.5),
        "healthy_stop_p90_min": _q(stops, 0.9),
        "healthy_last_date_median_min": _q(
            [r["eq_last_min"] for r in healthy if r["eq_last_min"] is not None], 0.5
        ),
        "healthy_stop_after_last_confirmation_median_min": _q(
            [
                r["stop_min"] - r["confirmed_last_min"]
                for r in healthy
                if r["confirmed_last_min"] is not None
            ],
            0.5,
        ),
        "undecided_at_limit": sum(not r["decided"] for r in results),
        "agreement": agree / len(results) if results else None,
        "agreement_without_faults_after_stop": (
            sum(r["hour"] == r["short"] for r in judged) / len(judged) if judged else None
        ),
        "faults_after_stop": len(after),
        "healthy_stop_load_median_min": _q([r["stop_load_min"] for r in healthy], 0.5),
        "healthy_predicted_median_min": [
            _q([r["predicted_min"][k] for r in healthy if r["predicted_min"][k] is not None], 0.5)
            for k in range(len(PREDICTED_AT_S))
        ],
        "healthy_prediction_error_median": [
            _q([e[k] for e in errors if e[k] is not None], 0.5) for k in range(len(PREDICTED_AT_S))
        ],
        "table": {f"{a} -> {b}": n for (a, b), n in sorted(table.items())},
        "pass_where_hour_fails": false_pass,
    }


def _f(value: float | None, spec: str = "5.1f") -> str:
    """A figure, or "–" where it is not available (never 0)."""
    return "  –  " if value is None else f"{value:{spec}}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", type=int, default=208, help="servers to run (default 208)")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument(
        "--without",
        action="append",
        default=[],
        choices=CLAUSE_NAMES,
        help="with this clause of the equilibrium rule off (repeatable; 'scale': the "
        "profile's windows for every device, the rule before 2026-12-05)",
    )
    args = parser.parse_args(argv)
    started = time.perf_counter()
    with ProcessPoolExecutor(args.jobs) as pool:
        todo = [(kind, seed, tuple(args.without)) for kind, seed in servers(args.servers)]
        results = list(pool.map(job, todo))
    report = summarise(results)
    report["wall_s"] = round(time.perf_counter() - started, 1)
    report["without"] = args.without
    windows = Counter(w for r in results if r["kind"] == "healthy" for w in r["window_s"])
    report["healthy_device_windows_s"] = {f"{w:g}": n for w, n in sorted(windows.items())}
    for r in results:
        after = None if r["ref_last_min"] is None else r["stop_min"] - r["ref_last_min"]
        print(
            f"{r['label']:<40} seed {r['seed']}: stop {r['stop_min']:5.1f} min "
            f"(last date {_f(r['eq_last_min'])}, reference {_f(r['ref_last_min'])}, truth "
            f"{_f(r['truth_last_min'])}; stop − reference {_f(after, '+5.1f')}) "
            f"{r['short']:<10} hour {r['hour']:<10}{'' if r['decided'] else ' undecided at limit'}"
        )
    print(f"healthy stop − latest reference equilibrium: median "
          f"{_f(report['healthy_stop_after_reference_median_min'], '.2f')} min, p90 "
          f"{_f(report['healthy_stop_after_reference_p90_min'], '.2f')} min, max "
          f"{_f(report['healthy_stop_after_reference_max_min'], '.2f')} min "
          f"({report['healthy_without_reference']} without a reference); the simulator's truth "
          f"(die within {TEMP_BAND_C} °C of its hunt's band): median "
          f"{_f(report['healthy_stop_after_truth_median_min'], '.2f')}, p90 "
          f"{_f(report['healthy_stop_after_truth_p90_min'], '.2f')} min")  # fmt: skip
    print("healthy stop median by SKU (min of load):", {
        k: _f(v, ".1f").strip() for k, v in report["healthy_stop_median_min_by_sku"].items()
    }, "; stop − reference:", {
        k: _f(v, ".2f").strip()
        for k, v in report["healthy_stop_after_reference_median_min_by_sku"].items()
    })  # fmt: skip
    print(f"healthy stop: median {report['healthy_stop_median_min']} min, p90 "
          f"{report['healthy_stop_p90_min']} min over {report['healthy']} servers; last date "
          f"median {report['healthy_last_date_median_min']} min; stop after the hour's last "
          f"confirmation median {report['healthy_stop_after_last_confirmation_median_min']} "
          "min")  # fmt: skip
    print("agreement (hour -> until-steady):", report["table"], f"= {report['agreement']}",
          f"({report['agreement_without_faults_after_stop']} without the "
          f"{report['faults_after_stop']} faults that start after the stop)")  # fmt: skip
    print(f"healthy: predicted verdict after 5/10 min of load "
          f"{report['healthy_predicted_median_min']} min (median) against the stop "
          f"{report['healthy_stop_load_median_min']} min; median relative error "
          f"{report['healthy_prediction_error_median']}")  # fmt: skip
    for r in report["pass_where_hour_fails"]:
        begun = "begun before the stop" if r["fault_begun"] else "starts after the stop"
        seen = r["first_seen_min"]
        if r["fault_begun"] and seen is not None and seen > r["stop_min"]:
            begun += f", first seen at {seen:.1f} min, after it"
        print(f"PASS where the hour FAILs: {r['label']} seed {r['seed']} ({begun})")
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
