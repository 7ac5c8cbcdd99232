"""How often the verdict is right: the analysis measured like a classifier on the sim.

Runs the simulated server (``testkit.sim.simulate``: no store, the same records straight into
the analysis; a test in tests/scenarios checks that both paths give the same analysis) over
many seeds:

- healthy servers (``HEALTHY``: every simulated SKU in rooms 5 °C cooler to 7 °C warmer
  than nominal, +4 °C being a rear-row position; the default H100 server over ``--seeds``,
  the others over ``--sku-seeds``; and GEMM alone): the false-fail rate per device, the
  power-capped drift (the cold→steady loss the power cap explains, docs/verdict.md),
  how close the worst device came to the throughput floors, and the equilibrium time
  against the simulator's own truth (``SimServer.thermal_truth``, ``hunt_truth``): "delay"
  is declared minus the first time after which the die (the fans' slow hunt left out) stays
  within 0.5 °C of the temperature it settles to. "Early" counts a time declared while the
  die, as it is, lies more than 1 °C outside the band [asymptote - A, asymptote + A] that
  its fans' hunt of amplitude A sweeps at equilibrium: a ±1 °C hunt over 10 min must count
  as equilibrium (issue 13), so a rule on the readings cannot tell the hunt from the last
  degree of an approach, and "the asymptote" of a hunting device is that band. "Strict"
  counts the old measure (declared over a minute before the die, hunt left out, stays within
  1 °C), kept to show what the hunt costs; "away" is that die's distance at the declared
  time;
- the telemetry faults (``frozen``, ``glitch``, ``gap``, ``reset``) a minute or more into
  the load: caught when the analysis names each at its time (a telemetry event) and, for a
  freeze only, fails the device; the others must stay PASS;
- each fault kind at several severities (``CASES``), on one GPU drawn per seed, timed
  faults at a random time and length (some inside the warm-up, the rest before, inside and
  after the steady window): the detection rate (the faulted device FAILs wherever the fault
  falls after the warm-up), how often the diagnosis names the right cause, the false-fail
  rate of the other devices of those servers, and a confusion table per fault kind by
  where the fault fell.

``--log-forms`` runs only the logs section (issue 39): per seed an 8-GPU server held by SW
thermal slowdown as the driver does it (``sw-thermal``: at its max operating temperature,
the clock swinging between its floor and its maximum) and a healthy one, each written in
every log form of ``testkit.logs.FORMS`` (nvidia-smi's reasons as a bitmask under both
names, one column per reason under both names, a partial set, the counters, none; the
averaged, instantaneous or both power readings; dcgmi dmon's bitmask and counters; a CSV
with a column per reason) and imported with ``soak import``'s own readers: the throttled
GPUs' share named (FAIL, or WARN of a thermal check, with cause thermal; never
hardware-fault), the healthy false FAILs, and the begun-under-load naming of a healthy log
cut 10-20 min into its load and of one from cold that starts at its first loaded row
(never named). ``--log-seeds`` (25: 200 device-runs per form) sets its size; the SKU turns
over H100 SXM, A100 SXM and H200 with the seed.

Prints tables and one JSON line. ``--seeds`` (42: each SKU at nominal inlet, each timed
fault kind, the 7 %-slower part), ``--sku-seeds`` (17: the other healthy groups),
``--fault-seeds`` (5: the other fault cases), ``--hours`` (40 min, the soak of issue 14) and
``--jobs`` (the CPU count) set the size: 753 runs of 8 GPUs, 3,112 healthy device-runs, some
40 minutes on 2 shared cores. ``--quick`` runs 10 seeds of each.
``--sensors ideal`` runs the sim with ideal sensors instead of the real-sensor behaviours
(refresh, fan overshoot and hunt, heavy-tailed work noise; docs/simulator.md).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from soak.analysis.analyze import Analysis, DeviceResult, analyze_run
from soak.analysis.checks import retention_split
from soak.devices.sim.params import SENSORS
from soak.model import EventKind
from soak.profile import Profile, load_profile
from testkit.cases import CASES, HEALTHY, Case, Healthy
from testkit.cases import gpu_for as _gpu_for
from testkit.cases import telemetry_timing as _telemetry_timing
from testkit.cases import timing as _timing
from testkit.logs import FORMS, FORMS_BY_NAME, read_log, write_log
from testkit.sim import BASELINE_S, at_time, settled_at, simulate

NEAR_C, CLOSE_C = 0.5, 1.0  # truth: within 0.5 °C; "early": still over 1 °C away
EARLY_GRACE_S = 60.0


# ---------------------------------------------------------------------------------------
# The cases
# ---------------------------------------------------------------------------------------


def healthy_job(args: tuple[Healthy, int, int, float, str]) -> dict:
    group, seed, gpus, duration_s, sensors = args
    run = simulate(
        seed=seed,
        faults=group.faults,
        gpus=gpus,
        sku=group.sku,
        workload=group.workload,
        duration_s=duration_s,
        truth=True,
        chassis=SENSORS[sensors],
    )
    analysis = analyze_run(run.data, PROFILE)
    devices = []
    for d in analysis.devices:
        dist = run.distance(d.index)
        band = run.distance(d.index, hunt=True)
        eq = d.facts.equilibrium
        eq_s = eq.time_s if eq else None
        devices.append(
            {
                "margins": _margins(d, analysis),
                "verdict": d.verdict,
                "diagnosis": d.diagnosis,
                "fails": sorted({c.check for c in d.checks if c.status == "fail"}),
                "warns": sorted({c.check for c in d.checks if c.status == "warn"}),
                "eq_s": eq_s,
                "truth_near_s": settled_at(run.truth_t, dist, NEAR_C),
                "truth_close_s": settled_at(run.truth_t, dist, CLOSE_C),
                "away_c": at_time(run.truth_t, dist, eq_s),
                "band_away_c": at_time(run.truth_t, band, eq_s),
                "hunt_c": run.hunt_amplitude(d.index),
            }
        )
    return {"group": group.label, "seed": seed, "verdict": analysis.verdict, "devices": devices}


def _margins(d: DeviceResult, analysis: Analysis) -> dict[str, float | None]:
    """How close a device came to failing the throughput rules: its worst steady/cold ratio
    and its worst steady rate over the server median, across parts."""
    f = d.facts
    retention, vs_median, drift, strict = [], [], [], []
    for _, late in (("steady", f.steady), ("final", f.final)):
        for part in late.throughput if late else {}:
            split = retention_split(f, late, part, PROFILE) if late else None
            if split is not None:
                drift.append(split.drift)
                strict.append(split.strict_ratio)
    for part, rate in (f.steady.throughput if f.steady else {}).items():
        cold = f.cold.throughput.get(part) if f.cold else None
        if rate is not None and cold:
            retention.append(rate / cold)
        rates = [x.facts.steady.throughput.get(part) for x in analysis.devices if x.facts.steady]
        finite = [r for r in rates if r is not None]
        if rate is not None and finite:
            vs_median.append(rate / float(np.median(finite)))
    return {
        "retention": min(retention, default=None),
        "vs_median": min(vs_median, default=None),
        "drift": max(drift, default=None),
        "strict": min(strict, default=None),
    }


def _named(analysis: Analysis, episode: str, gpu: int, at_s: float) -> bool:
    """Whether the analysis names the telemetry fault injected ``at_s`` after the load's
    start on ``gpu``, at its time: a freeze from its first held reading, a gap from the last
    reading before it, a reset at the first reading after it, readings left out after it."""
    t = BASELINE_S + at_s
    for e in analysis.events:
        if e.kind is not EventKind.TELEMETRY or e.device != gpu:
            continue
        if e.details.get("episode") != episode:
            continue
        if episode == "frozen" and abs(float(e.details["from_s"]) - t) <= 1.0:
            return True
        if episode == "gap" and t - 1.0 <= float(e.details["from_s"]) <= t:
            return True
        if episode == "reset" and t <= e.t_s <= t + 1.0:
            return True
        if episode == "implausible" and e.t_s >= t:
            return True
    return False


def _where(at_s: float, d: DeviceResult) -> str:
    """Where a fault that started ``at_s`` after the load's start fell for device ``d``."""
    f = d.facts
    t = BASELINE_S + at_s
    if f.warmup_end_s is not None and t < f.warmup_end_s:
        return "warm-up"
    if f.steady is not None and t < f.steady.window.start_s:
        return "before steady"
    if f.steady is not None and t <= f.steady.window.end_s:
        return "steady"
    if f.final is not None and t >= f.final.window.start_s:
        return "final"
    return "after steady"


def fault_job(args: tuple[Case, int, int, str, float, str]) -> dict:
    case, seed, gpus, workload, duration_s, sensors = args
    gpu = _gpu_for(seed, gpus)
    at, length = (_telemetry_timing if case.named else _timing)(seed, duration_s)
    spec = case.spec.format(gpu=gpu, at=at, **{"for": length})
    run = simulate(
        seed=seed,
        faults=(spec,),
        gpus=gpus,
        workload=workload,
        duration_s=duration_s,
        chassis=SENSORS[sensors],
    )
    analysis = analyze_run(run.data, PROFILE)
    target = next(d for d in analysis.devices if d.index == gpu)
    others = [d for d in analysis.devices if d.index != gpu]
    flagged = target.verdict == "FAIL" or any(
        c.check == case.flag and c.status != "pass" for c in target.checks
    )
    timed = "{at}" in case.spec
    return {
        "case": case.spec,
        "seed": seed,
        "gpu": gpu,
        "where": _where(at, target) if timed else "whole run",
        "warned": any(c.status == "warn" for c in target.checks if c.check == "hw_events"),
        "others_warned": sum(
            any(c.status == "warn" and c.check != "equilibrium" for c in d.checks) for d in others
        ),
        "verdict": target.verdict,
        "named": case.named is not None and _named(analysis, case.named, gpu, at),
        "flagged": flagged,
        "diagnosis": target.diagnosis,
        "fails": sorted({c.check for c in target.checks if c.status == "fail"}),
        "others_failed": sum(d.verdict == "FAIL" for d in others),
        "others": len(others),
    }


PROFILE: Profile = load_profile(None)


# ---------------------------------------------------------------------------------------
# The logs (issue 39): each form of the reasons and power, imported as soak import does
# ---------------------------------------------------------------------------------------

LOG_SKUS = ("h100-sxm", "a100-sxm", "h200")  # NVIDIA: what nvidia-smi and dcgmi log
THERMAL_CHECKS = {"sw_thermal", "temp_margin", "slowdown_temp", "hot_spot", "hw_events"}
CUT_S = (600.0, 1200.0)  # a begun-under-load log starts this far into the load


def _import_log(run, form, start_s: float, folder: Path) -> Analysis:
    """``run`` written in ``form`` from ``start_s``, imported and analysed as soak does."""
    from soak.importers.core import ImportOptions, write_run
    from soak.importers.source import describe
    from soak.pipeline import analyze
    from soak.store import RunStore

    path = write_log(run.data, form, folder / f"log-{start_s:.0f}", start_s=start_s)
    options = ImportOptions("imported", "node", folder / "reports", {}, "bench")
    result = write_run(read_log(path, form), describe(path, form.format), options)
    store = RunStore.open(result.run_dir)
    try:
        return analyze(store, PROFILE)
    finally:
        store.close()


def _named_thermal(d: DeviceResult) -> bool:
    """A throttled GPU named: FAIL with cause thermal, or a thermal check's warning."""
    if d.diagnosis == "hardware-fault":
        return False
    if d.verdict == "FAIL":
        return d.diagnosis.startswith("thermal-limited")
    return any(c.status == "warn" and c.check in THERMAL_CHECKS for c in d.checks)


def _begun(d: DeviceResult) -> bool:
    return d.facts.warm_start is not None and d.facts.warm_start.begun


def log_job(args: tuple[int, int, float, tuple[str, ...]]) -> list[dict]:
    """One seed: a server held by SW thermal slowdown and a healthy one, in every form."""
    import tempfile

    seed, gpus, duration_s, forms = args
    sku = LOG_SKUS[seed % len(LOG_SKUS)]
    hot = simulate(seed=seed, faults=("sw-thermal",), gpus=gpus, sku=sku, workload="gemm",
                   duration_s=duration_s)  # fmt: skip
    healthy = simulate(seed=seed, gpus=gpus, sku=sku, workload="gemm", duration_s=duration_s)
    cut = BASELINE_S + float(np.random.default_rng([seed, 0xC07]).uniform(*CUT_S))
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in forms:
            form = FORMS_BY_NAME[name]
            folder = Path(tmp) / f"f{len(out)}"
            folder.mkdir()
            throttled = _import_log(hot, form, 0.0, folder)
            warm = _import_log(healthy, form, cut, folder)
            cold = _import_log(healthy, form, BASELINE_S + 1.0, folder)  # no idle head
            out.append(
                {
                    "form": name,
                    "seed": seed,
                    "sku": sku,
                    "throttled": len(throttled.devices),
                    "named": sum(_named_thermal(d) for d in throttled.devices),
                    "hardware_fault": sum(
                        d.diagnosis == "hardware-fault" for d in throttled.devices
                    ),
                    "diagnoses": sorted(d.diagnosis for d in throttled.devices),
                    "healthy": len(warm.devices) + len(cold.devices),
                    "healthy_fail": sum(
                        d.verdict == "FAIL" for d in [*warm.devices, *cold.devices]
                    ),
                    "healthy_fail_checks": sorted(
                        {
                            c.check
                            for d in [*warm.devices, *cold.devices]
                            for c in d.checks
                            if c.status == "fail"
                        }
                    ),
                    "begun": len(warm.devices),
                    "begun_named": sum(_begun(d) for d in warm.devices),
                    "cold": len(cold.devices),
                    "cold_named": sum(_begun(d) for d in cold.devices),
                }
            )
    return out


def _summarise_logs(results: list[dict]) -> list[dict]:
    rows = []
    for form in FORMS:
        mine = [r for r in results if r["form"] == form.name]
        if not mine:
            continue
        total = {k: sum(r[k] for r in mine) for k in (
            "throttled", "named", "hardware_fault", "healthy", "healthy_fail", "begun",
            "begun_named", "cold", "cold_named")}  # fmt: skip
        diagnoses: dict[str, int] = {}
        for r in mine:
            for d in r["diagnoses"]:
                diagnoses[d] = diagnoses.get(d, 0) + 1
        rows.append(
            {
                "form": form.name,
                "seeds": len(mine),
                **total,
                "named_rate": _share(total["named"], total["throttled"]),
                "healthy_false_fail_rate": _share(total["healthy_fail"], total["healthy"]),
                "begun_named_rate": _share(total["begun_named"], total["begun"]),
                "cold_named_rate": _share(total["cold_named"], total["cold"]),
                "diagnoses": diagnoses,
                "healthy_fail_checks": sorted({c for r in mine for c in r["healthy_fail_checks"]}),
                "missed_seeds": sorted({r["seed"] for r in mine if r["named"] < r["throttled"]}),
            }
        )
    return rows


def _print_logs(rows: list[dict], gpus: int, hours: float) -> None:
    print(
        f"Logs (issue 39): {gpus}-GPU servers, {hours:g} h, written in each form and imported; "
        f"throttled: held by SW thermal slowdown, named = FAIL or WARN with cause thermal "
        f"(never hardware-fault); healthy: cut {CUT_S[0] / 60:.0f}-{CUT_S[1] / 60:.0f} min into "
        f"the load (begun under load) and from the first loaded row (from cold)"
    )
    print(
        f"{'form':<40} {'seeds':>5} {'throttled named':>16} {'HW fault':>8} "
        f"{'healthy FF':>11} {'begun named':>12} {'cold named':>11}"
    )
    for r in rows:
        print(
            f"{r['form']:<40} {r['seeds']:>5} "
            f"{r['named']:>4}/{r['throttled']:<4} {_pct(r['named_rate']):>6} "
            f"{r['hardware_fault']:>8} {_pct(r['healthy_false_fail_rate'], 2):>11} "
            f"{_pct(r['begun_named_rate']):>12} {_pct(r['cold_named_rate']):>11}"
            + (f"  {r['healthy_fail_checks']}" if r["healthy_fail_checks"] else "")
        )
    print("diagnoses of the throttled GPUs:", _merge([r["diagnoses"] for r in rows]))


def _share(hits: int, total: int) -> float:
    return hits / total if total else math.nan


def _quantile(values: list[float], q: float) -> float | None:
    return float(np.quantile(values, q)) if values else None


def _summarise_healthy(label: str, results: list[dict]) -> dict:
    devices = [d for r in results for d in r["devices"]]
    false_fails = [d for d in devices if d["verdict"] == "FAIL"]
    delays, early, early_strict, missing, away = [], 0, 0, 0, []
    for d in devices:
        if d["eq_s"] is None or d["truth_near_s"] is None:
            missing += 1
            continue
        delays.append(d["eq_s"] - d["truth_near_s"])
        away.append(d["away_c"])
        early += d["band_away_c"] > CLOSE_C
        if d["truth_close_s"] is not None and d["eq_s"] < d["truth_close_s"] - EARLY_GRACE_S:
            early_strict += 1
    fail_checks: dict[str, int] = {}
    for d in false_fails:
        for c in d["fails"]:
            fail_checks[c] = fail_checks.get(c, 0) + 1
    retention = [d["margins"]["retention"] for d in devices if d["margins"]["retention"]]
    drift = [d["margins"]["drift"] for d in devices if d["margins"]["drift"] is not None]
    strict = [d["margins"]["strict"] for d in devices if d["margins"]["strict"] is not None]
    warn_checks: dict[str, int] = {}
    for d in devices:
        for c in d["warns"]:
            warn_checks[c] = warn_checks.get(c, 0) + 1
    vs_median = [d["margins"]["vs_median"] for d in devices if d["margins"]["vs_median"]]
    return {
        "group": label,
        "servers": len(results),
        "devices": len(devices),
        "false_fail_devices": len(false_fails),
        "false_fail_rate": _share(len(false_fails), len(devices)),
        "false_fail_servers": sum(r["verdict"] == "FAIL" for r in results),
        "false_fail_checks": fail_checks,
        "retention_min": min(retention, default=None),
        "retention_p01": _quantile(retention, 0.01),
        "drift_p50": _quantile(drift, 0.5),
        "drift_p99": _quantile(drift, 0.99),
        "drift_max": max(drift, default=None),
        "strict_min": min(strict, default=None),
        "warn_devices": sum(bool(d["warns"]) for d in devices),
        "warn_checks": warn_checks,
        "vs_median_min": min(vs_median, default=None),
        "equilibrium": {
            "devices": len(delays),
            "not_found": missing,
            "early": early,
            "early_strict": early_strict,
            "away_median_c": _quantile(away, 0.5),
            "away_p90_c": _quantile(away, 0.9),
            "away_max_c": max(away, default=None),
            "delay_median_s": _quantile(delays, 0.5),
            "delay_p10_s": _quantile(delays, 0.1),
            "delay_p90_s": _quantile(delays, 0.9),
            "delay_min_s": min(delays, default=None),
            "delay_max_s": max(delays, default=None),
        },
    }


PLACES = ("whole run", "warm-up", "before steady", "steady", "after steady", "final")


def _summarise_faults(results: list[dict]) -> list[dict]:
    """Per case: detection where the fault must FAIL the device (anywhere after the warm-up;
    inside it a protection event must only warn), and a confusion table by where it fell."""
    rows = []
    for case in CASES:
        mine = [r for r in results if r["case"] == case.spec]
        if not mine:
            continue
        warmup_warns = case.kind in {"hw-slowdown", "power-brake", "hw-thermal"}
        judged = [r for r in mine if not (warmup_warns and r["where"] == "warm-up")]
        if case.named is None:
            caught = [r for r in judged if r["verdict"] == "FAIL"]
        else:  # named at its time; a freeze also fails its device, the others do not
            frozen = case.kind == "frozen"
            caught = [r for r in judged if r["named"] and (r["verdict"] == "FAIL") == frozen]
        right = [r for r in caught if r["diagnosis"] == case.expect]
        others = sum(r["others"] for r in mine)
        goal = case.goal if case.goal is not None else 1.0 if case.clear else None
        rate = _share(len(caught), len(judged))
        table = {}
        for place in PLACES:
            here = [r for r in mine if r["where"] == place]
            if not here:
                continue
            table[place] = {
                "fault FAIL": sum(r["verdict"] == "FAIL" for r in here),
                "fault WARN": sum(r["verdict"] != "FAIL" and r["warned"] for r in here),
                "fault PASS": sum(r["verdict"] != "FAIL" and not r["warned"] for r in here),
                "others FAIL": sum(r["others_failed"] for r in here),
                "others PASS": sum(r["others"] - r["others_failed"] for r in here),
            }
        rows.append(
            {
                "kind": case.kind,
                "fault": case.label,
                "seeds": len(mine),
                "judged": len(judged),
                "detected": len(caught),
                "detection_rate": rate,
                "flagged_rate": _share(sum(r["flagged"] for r in mine), len(mine)),
                "goal": goal,
                "met": None if goal is None else rate >= goal,
                "diagnosis": case.expect,
                "diagnosis_right": _share(len(right), len(caught)),
                "wrong_diagnoses": sorted({r["diagnosis"] for r in caught} - {case.expect}),
                "missed_seeds": [r["seed"] for r in judged if r not in caught][:10],
                "bystander_false_fail_rate": _share(sum(r["others_failed"] for r in mine), others),
                "confusion": table,
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--seeds",
        type=int,
        default=42,
        help="each SKU at nominal inlet, each timed fault kind, the 7 %%-slower part (42)",
    )
    parser.add_argument("--sku-seeds", type=int, default=17, help="other healthy groups (17)")
    parser.add_argument("--fault-seeds", type=int, default=5, help="other fault cases (5)")
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--hours", type=float, default=40 / 60, help="load per run (40 min)")
    parser.add_argument("--workload", default="mix", help="of the fault cases")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--quick", action="store_true", help="10 seeds everywhere, for a look")
    parser.add_argument("--only", default=None, help="only groups and cases containing this")
    parser.add_argument(
        "--log-forms",
        action="store_true",
        help="only the logs section: every log form of testkit.logs, imported (issue 39)",
    )
    parser.add_argument("--log-seeds", type=int, default=25, help="seeds per log form (25)")
    parser.add_argument(
        "--sensors",
        choices=tuple(SENSORS),
        default="real",
        help="the sim's sensors: real (refresh, fan overshoot and hunt, heavy-tailed work "
        "noise; default) or ideal (fresh readings, normal noise, steady fans)",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds = args.sku_seeds = args.fault_seeds = 10
    count = {"seeds": args.seeds, "sku": args.sku_seeds, "faults": args.fault_seeds}
    duration = args.hours * 3600
    if args.log_forms:
        return _logs_main(args, duration)
    groups = [g for g in HEALTHY if args.only is None or args.only in f"healthy {g.label}"]
    cases = [c for c in CASES if args.only is None or args.only in c.spec]
    start = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        healthy_jobs = [
            (g, s, args.gpus, duration, args.sensors) for g in groups for s in range(count[g.seeds])
        ]
        healthy = list(pool.map(healthy_job, healthy_jobs, chunksize=2))
        fault_jobs = [
            (c, 1000 + s, args.gpus, args.workload, duration, args.sensors)
            for c in cases
            for s in range(count[c.seeds])
        ]
        faults = list(pool.map(fault_job, fault_jobs, chunksize=2))
    wall = time.perf_counter() - start
    report = {
        "bench": "verdict_accuracy",
        "gpus": args.gpus,
        "hours": args.hours,
        "fault_workload": args.workload,
        "sensors": args.sensors,
        "retention_floor": PROFILE.checks.min_throughput_retention,
        "outlier_limit": 1 - PROFILE.checks.outlier_min_rel,
        "healthy": [
            _summarise_healthy(g.label, [r for r in healthy if r["group"] == g.label])
            for g in groups
        ],
        "faults": _summarise_faults(faults),
        "wall_s": wall,
    }
    _print_table(report)
    print(json.dumps(report))
    return 0


def _logs_main(args: argparse.Namespace, duration: float) -> int:
    forms = tuple(f.name for f in FORMS if args.only is None or args.only in f.name)
    seeds = 10 if args.quick else args.log_seeds
    start = time.perf_counter()
    jobs = [(seed, args.gpus, duration, forms) for seed in range(seeds)]
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        results = [r for rows in pool.map(log_job, jobs) for r in rows]
    rows = _summarise_logs(results)
    _print_logs(rows, args.gpus, args.hours)
    wall = time.perf_counter() - start
    print(f"wall {wall:.0f} s")
    print(json.dumps({"bench": "verdict_accuracy", "section": "logs", "gpus": args.gpus,
                      "hours": args.hours, "logs": rows, "wall_s": wall}))  # fmt: skip
    return 0


def _pct(value: float | None, digits: int = 1) -> str:
    return "—" if value is None or math.isnan(value) else f"{100 * value:.{digits}f} %"


def _s(value: float | None) -> str:
    return "—" if value is None else f"{value:.0f}"


def _print_table(report: dict) -> None:
    print(
        f"Healthy servers ({report['gpus']} GPUs, {report['hours']:g} h): false fails, how "
        f"close the worst device came (floor {_pct(report['retention_floor'], 0)} of cold, "
        f"{_pct(report['outlier_limit'], 0)} of the server median), and equilibrium against "
        f"the sim's truth (delay = declared - within {NEAR_C} °C of the asymptote, hunt left "
        f"out; early = declared while the die is over {CLOSE_C} °C outside the band its fan "
        f"hunt sweeps around the asymptote; strict = declared over {EARLY_GRACE_S:.0f} s before "
        f"the die, hunt left out, stays within {CLOSE_C} °C; away = that die's distance at the "
        f"declared time)"
    )
    print(
        f"{'group':<30} {'devices':>7} {'false fail':>10} {'worst ret':>9} {'worst/med':>9} "
        f"{'drift p50/p99/max':>19} {'warned':>6} {'early':>5} {'strict':>6} "
        f"{'away p50/p90/max °C':>19} {'delay p10/med/p90/max s':>24}"
    )
    for h in report["healthy"]:
        eq = h["equilibrium"]
        delays = "/".join(
            _s(eq[k]) for k in ("delay_p10_s", "delay_median_s", "delay_p90_s", "delay_max_s")
        )
        drift = "/".join(_pct(h[k]) for k in ("drift_p50", "drift_p99", "drift_max"))
        away = "/".join(
            "—" if eq[k] is None else f"{eq[k]:.2f}"
            for k in ("away_median_c", "away_p90_c", "away_max_c")
        )
        print(
            f"{h['group']:<30} {h['devices']:>7} {_pct(h['false_fail_rate'], 2):>10} "
            f"{_pct(h['retention_min']):>9} {_pct(h['vs_median_min']):>9} "
            f"{drift:>19} {h['warn_devices']:>6} {eq['early']:>5} {eq['early_strict']:>6} "
            f"{away:>19} {delays:>24}"
            + (f"  {h['false_fail_checks']}" if h["false_fail_checks"] else "")
        )
    print()
    print(
        f"Faults on one GPU drawn per seed ({report['fault_workload']}): detection (the device "
        f"FAILs), flagged (FAIL or the fault's warning), right diagnosis among those caught, "
        f"false fails of the other GPUs"
    )
    print(
        f"{'fault':<30} {'seeds':>5} {'caught':>7} {'goal':>6} {'flagged':>8} {'diag ok':>8} "
        f"{'bystander FF':>12}  wrong diagnoses"
    )
    for r in report["faults"]:
        goal = "—" if r["goal"] is None else f"{100 * r['goal']:.0f} %"
        print(
            f"{r['fault']:<30} {r['seeds']:>5} {_pct(r['detection_rate']):>7} {goal:>6} "
            f"{_pct(r['flagged_rate']):>8} {_pct(r['diagnosis_right']):>8} "
            f"{_pct(r['bystander_false_fail_rate'], 2):>12}  {', '.join(r['wrong_diagnoses'])}"
        )
    devices = sum(h["devices"] for h in report["healthy"])
    fails = sum(h["false_fail_devices"] for h in report["healthy"])
    print(
        f"all healthy groups: {fails} false FAILs in {devices} device-runs "
        f"({_pct(_share(fails, devices), 3)}); warnings by check: "
        f"{_merge([h['warn_checks'] for h in report['healthy']])}"
    )
    print()
    print("Confusion per fault kind, by where the fault fell (faulted GPU: FAIL / WARN / PASS;")
    print("the other GPUs of those servers: FAIL / PASS)")
    for r in report["faults"]:
        print(f"  {r['fault']}")
        for place, c in r["confusion"].items():
            print(
                f"    {place:<14} fault {c['fault FAIL']:>4} FAIL {c['fault WARN']:>4} WARN "
                f"{c['fault PASS']:>4} PASS | others {c['others FAIL']:>4} FAIL "
                f"{c['others PASS']:>5} PASS"
            )
    print(f"wall {report['wall_s']:.0f} s")


def _merge(counts: list[dict[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for c in counts:
        for k, v in c.items():
            out[k] = out.get(k, 0) + v
    return out


if __name__ == "__main__":
    sys.exit(main())
