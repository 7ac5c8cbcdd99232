"""Workload efficiency: what soak's workers reach against a bare torch loop.

For ``gemm`` and ``membw``: the throughput soak measures inside a ``WorkerPool`` worker,
polled by a 1 Hz tick loop in this process that also reads /proc/stat (as the runner reads
telemetry), against a bare torch loop doing the same operation at the same size in a plain
spawned process that imports no soak code. ``train`` and ``mix`` are informational (soak
only). For ``gemm`` each round also sweeps the bare matmul rate over dtypes and sizes (on a
CPU fp32 and bf16, n = 1024...4096) and sets soak's rate against the best of that sweep:
what soak loads the part with against what its matrix unit does at its hottest.

Goal: gemm and membw at least 97 % of bare, and soak's GEMM at least 95 % of the best
bare rate of any dtype and size. Soak, bare and the sweep alternate in order from round to
round to cancel drift on a shared machine; the table shows medians of per-round ratios, and
soak's rate is work over the whole measured span, verification pauses and pipe traffic
included. ``--option dtype=fp32`` runs soak as on a CPU without native bf16; its GEMM is
then also set against the best bare rate of its own dtype.

    python bench/workload_efficiency.py [--device cuda:0] [--seconds 10] [--rounds 3]

Prints a table, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
GOAL = 0.97
BEST_GOAL = 0.95  # soak's GEMM against the best bare rate of the sweep
SWEEP_SIZES = {"cuda": [2048, 4096, 8192, 12288, 16384], "cpu": [1024, 2048, 3072, 4096]}
SWEEP_DTYPES = {"cuda": ["bf16", "fp16", "fp8", "tf32", "fp32", "fp64"], "cpu": ["fp32", "bf16"]}


@dataclass(frozen=True, slots=True)
class SoakRun:
    """One soak measurement: rate per part over the measured span, and what set up."""

    rates: dict[str, float]
    units: dict[str, str]
    info: dict[str, Any]
    verify_failures: int
    outcome: str


@dataclass(slots=True)
class Row:
    """One workload part's rates per round: soak's, bare's at soak's size, and (gemm) the best
    bare rate of the round's sweep over every dtype and over soak's own dtype."""

    workload: str
    part: str
    unit: str
    soak: list[float] = field(default_factory=list)
    bare: list[float] = field(default_factory=list)
    best: list[float] = field(default_factory=list)
    best_own: list[float] = field(default_factory=list)

    def ratio(self) -> float | None:
        """Median over rounds of soak / bare at the same size."""
        return _median_ratio(self.soak, self.bare)

    def of_best(self) -> float | None:
        """Median over rounds of soak / the best bare rate of any dtype and size."""
        return _median_ratio(self.soak, self.best)

    def of_best_own(self) -> float | None:
        """Median over rounds of soak / the best bare rate of soak's dtype at any size."""
        return _median_ratio(self.soak, self.best_own)


def _median_ratio(num: list[float], den: list[float]) -> float | None:
    pairs = [a / b for a, b in zip(num, den, strict=False) if b > 0]
    return statistics.median(pairs) if pairs else None


# ---------------------------------------------------------------- soak side (this process)


def measure_soak(
    workload: str, device: str, seconds: float, warmup_s: float, options: dict[str, Any]
) -> SoakRun:
    """Run one WorkerPool worker with soak's defaults changed by ``options``; tick at 1 Hz
    like the runner; rate per part over the samples that start ``warmup_s`` after the
    worker's setup and end within ``seconds``."""
    sys.path.insert(0, str(ROOT))
    from soak.model import DeviceInfo, EventKind
    from soak.worker import WorkerPool
    from workloads import WorkloadOptions

    info = DeviceInfo(index=0, backend="bench", name=device, torch_device=device)
    pool = WorkerPool([info], workload, WorkloadOptions(**options), heartbeat_timeout_s=120)
    t0 = time.monotonic()
    pool.start(t0)
    samples, events = [], []
    ready_s: float | None = None
    tick = t0
    while ready_s is None or time.monotonic() - t0 < ready_s + warmup_s + seconds + 1.5:
        tick += 1.0
        time.sleep(max(0.0, tick - time.monotonic()))
        _read_proc_stat()
        update = pool.poll(time.monotonic() - t0)
        samples += update.samples
        events += update.events
        ready = [e for e in update.events if e.kind is EventKind.LOAD_START]
        if ready:
            ready_s = ready[0].t_s
        ended = [e for e in update.events if e.kind is EventKind.WORKER_OUTCOME]
        if ended:
            raise RuntimeError(f"soak {workload} worker ended: {ended[0].message}")
    update = pool.stop(time.monotonic() - t0)
    events += update.events
    start, end = ready_s + warmup_s, ready_s + warmup_s + seconds
    window = [s for s in samples if s.t_start_s >= start and s.t_end_s <= end]
    if not window:
        raise RuntimeError(f"no {workload} step fits in {seconds:g} s; raise --seconds")
    rates, units = {}, {}
    for part in sorted({s.part for s in window}):
        mine = [s for s in window if s.part == part]
        span = max(s.t_end_s for s in mine) - min(s.t_start_s for s in mine)
        rates[part] = sum(s.work for s in mine) / span
        units[part] = mine[0].unit
    failures = sum(e.kind is EventKind.VERIFICATION_FAILED for e in events)
    outcome = [e.details["outcome"] for e in events if e.kind is EventKind.WORKER_OUTCOME]
    load = [e.details for e in events if e.kind is EventKind.LOAD_START]
    return SoakRun(rates, units, load[0] if load else {}, failures, ",".join(outcome))


def _read_proc_stat() -> None:
    """What a telemetry read costs the coordinator, roughly."""
    try:
        Path("/proc/stat").read_text()
    except OSError:
        return


# ---------------------------------------------------------------- bare side (spawned child)


def bare_gemm(device: str, dtype: str, n: int, ring: int, seconds: float, warmup_s: float) -> float:
    """FLOP/s of ``out = a @ b.T`` over a ring of random matrices, plain torch."""
    import torch

    dev, mats, outs, one = _gemm_operands(torch, device, dtype, n, ring)
    state = {"i": 0, "o": 0}

    def run(count: int) -> float:
        for _ in range(count):
            i, o = state["i"], state["o"]
            _product(torch, dtype, mats[i], mats[(i + 1) % ring], outs[o], one)
            state["i"], state["o"] = (i + 2) % ring, 1 - o
        return count * 2.0 * n**3

    return _timed_loop(torch, dev, run, seconds, warmup_s)


def _gemm_operands(torch: Any, device: str, dtype: str, n: int, ring: int) -> tuple[Any, ...]:
    dev = torch.device(device)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    torch.set_float32_matmul_precision("high" if dtype == "tf32" else "highest")
    kinds = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32}
    kinds |= {"fp32": torch.float32, "fp64": torch.float64, "fp8": torch.bfloat16}
    make = kinds[dtype]
    mats = [torch.randn(n, n, device=dev, dtype=make) for _ in range(ring)]
    if dtype == "fp8":
        mats = [m.to(torch.float8_e4m3fn) for m in mats]
    out_dtype = torch.bfloat16 if dtype == "fp8" else make
    outs = [torch.empty(n, n, device=dev, dtype=out_dtype) for _ in range(2)]
    one = torch.ones((), dtype=torch.float32, device=dev)
    return dev, mats, outs, one


def _product(torch: Any, dtype: str, a: Any, b: Any, out: Any, one: Any) -> None:
    if dtype == "fp8":
        torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16, out=out)
    else:
        torch.matmul(a, b.t(), out=out)


def bare_membw(device: str, array_b: int, chunk_b: int, seconds: float, warmup_s: float) -> float:
    """Bytes/s of STREAM copy, triad, triad, copy over chunked float32 arrays."""
    import torch

    dev = torch.device(device)
    elements, chunk = array_b // 4, max(1, chunk_b // 4)
    sizes = [min(chunk, elements - s) for s in range(0, elements, chunk)]
    arrays = [[torch.randn(k, device=dev) for k in sizes] for _ in range(3)]
    state = {"k": 0}

    def run(count: int) -> float:
        moved = 0.0
        for _ in range(count):
            k = state["k"]
            a, b, c = arrays[0][k], arrays[1][k], arrays[2][k]
            c.copy_(a)
            torch.add(c, b, alpha=3.0, out=a)
            torch.add(a, b, alpha=-3.0, out=c)
            a.copy_(c)
            moved += 10.0 * 4 * sizes[k]
            state["k"] = (k + 1) % len(sizes)
        return moved

    return _timed_loop(torch, dev, run, seconds, warmup_s)


def _timed_loop(
    torch: Any, dev: Any, run: Callable[[int], float], seconds: float, warmup_s: float
) -> float:
    """Warm up, then run batches of about a second (one sync each) for ``seconds``;
    work over the whole span."""

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    run(1)
    sync()
    count, t0 = 1, time.perf_counter()
    while time.perf_counter() - t0 < warmup_s:
        t = time.perf_counter()
        run(count)
        sync()
        count = max(1, int(count * min(4.0, 1.0 / max(time.perf_counter() - t, 1e-6))))
    work, t0 = 0.0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        work += run(count)
        sync()
    return work / (time.perf_counter() - t0)


def best_matmul(device: str, budget_s: float) -> list[dict[str, Any]]:
    """The rate of ``a @ b.T`` per dtype and size, each timed over about budget_s."""
    import torch

    kind = torch.device(device).type
    rows = []
    for dtype in SWEEP_DTYPES[kind]:
        for n in SWEEP_SIZES[kind]:
            try:
                rate = bare_gemm(device, dtype, n, 2, budget_s, budget_s / 2)
            except (RuntimeError, NotImplementedError) as exc:
                rows.append({"dtype": dtype, "n": n, "error": str(exc).splitlines()[0]})
                continue
            rows.append({"dtype": dtype, "n": n, "flop_s": rate})
            if kind == "cuda":
                torch.cuda.empty_cache()
    return rows


def in_child(target: Callable[..., Any], *args: Any) -> Any:
    """Run ``target(*args)`` in a fresh spawned process and return its result."""
    ctx = mp.get_context("spawn")
    receive, send = ctx.Pipe(duplex=False)
    process = ctx.Process(target=_child_main, args=(send, target, args))
    process.start()
    send.close()
    try:
        ok, value = receive.recv()
    except EOFError as exc:
        raise RuntimeError(f"bare child died (exit code {process.exitcode})") from exc
    finally:
        process.join()
    if not ok:
        raise RuntimeError(value)
    return value


def _child_main(send: Any, target: Callable[..., Any], args: tuple[Any, ...]) -> None:
    try:
        send.send((True, target(*args)))
    except (RuntimeError, ValueError, NotImplementedError) as exc:
        send.send((False, f"{type(exc).__name__}: {exc}"))


# ---------------------------------------------------------------- the comparison


def compare(workload: str, args: argparse.Namespace) -> tuple[list[Row], dict]:
    """``args.rounds`` rounds of soak, bare (at soak's sizes) and, for gemm, the sweep, the
    order turning from round to round (soak first in the first: bare takes its sizes); the
    rows and soak's setup."""
    rows: dict[str, Row] = {}
    info: dict[str, Any] = {}
    failures = 0
    sides = ["soak", "bare", "sweep"] if workload == "gemm" and args.sweep_s > 0 else ["soak"]
    if workload in BARE and "bare" not in sides:
        sides.append("bare")
    sweeps = []
    for r in range(args.rounds):
        order = sides if r == 0 else sides[r % len(sides) :] + sides[: r % len(sides)]
        for side in order:
            if side == "soak":
                run = measure_soak(workload, args.device, args.seconds, args.warmup, args.option)
                info, failures = run.info, failures + run.verify_failures
                for part, rate in run.rates.items():
                    rows.setdefault(part, Row(workload, part, run.units[part])).soak.append(rate)
            elif side == "bare" and workload in BARE:
                rows[workload].bare.append(in_child(*_bare_call(workload, info, args)))
            elif side == "sweep":
                sweeps.append(in_child(best_matmul, args.device, args.sweep_s))
        if sweeps and workload in rows:
            rates = [p for p in sweeps[-1] if "flop_s" in p]
            own = [p["flop_s"] for p in rates if p["dtype"] == info.get("dtype")]
            rows[workload].best.append(max(p["flop_s"] for p in rates))
            rows[workload].best_own.append(max(own, default=0.0))
        print(f"  {workload} round {r + 1}: " + _round_text(rows), file=sys.stderr)
    info["verification_failures"] = failures
    info["sweeps"] = sweeps
    return list(rows.values()), info


BARE = ("gemm", "membw")  # the workloads with a bare twin; train and mix are informational


def _bare_call(workload: str, info: dict[str, Any], args: argparse.Namespace) -> tuple[Any, ...]:
    """The bare function and its arguments, sized from soak's LOAD_START details."""
    timing = (args.seconds, args.warmup)
    if workload == "gemm":
        return (bare_gemm, args.device, info["dtype"], info["n"], info["ring"], *timing)
    return (bare_membw, args.device, info["array_b"], info["chunk_b"], *timing)


def _round_text(rows: dict[str, Row]) -> str:
    return ", ".join(
        f"{p} soak {r.soak[-1]:.4g}"
        + (f" bare {r.bare[-1]:.4g}" if r.bare else "")
        + (f" best {r.best[-1]:.4g}" if r.best else "")
        for p, r in rows.items()
        if r.soak
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="torch device; default cuda:0 or cpu")
    parser.add_argument("--seconds", type=float, default=10.0, help="measured span per run")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds skipped per run")
    parser.add_argument("--rounds", type=int, default=3, help="soak/bare pairs per workload")
    parser.add_argument("--workloads", default="gemm,membw,train,mix")
    parser.add_argument(
        "--dtype", default=None, help="soak's GEMM dtype; default: the one soak chooses"
    )
    parser.add_argument(
        "--ring", type=int, default=None, help="soak's GEMM operand ring; default: soak's"
    )
    parser.add_argument(
        "--sweep-s", type=float, default=0.6, help="time per sweep point; 0 skips the sweep"
    )
    args = parser.parse_args(argv)
    if args.device is None:
        args.device = "cuda:0" if _cuda_available() else "cpu"
    args.option = {"dtype": args.dtype} if args.dtype else {}
    if args.ring is not None:
        args.option["gemm_ring"] = args.ring
    results: dict[str, Any] = {"device": args.device, "options": args.option, "workloads": {}}
    all_rows: list[Row] = []
    for workload in args.workloads.split(","):
        rounds = args.rounds if workload in BARE else 1
        rows, info = compare(workload, argparse.Namespace(**{**vars(args), "rounds": rounds}))
        all_rows += rows
        results["workloads"][workload] = {"setup": info, "rows": [_row_json(r) for r in rows]}
    gemm = results["workloads"].get("gemm")
    sweeps = gemm["setup"]["sweeps"] if gemm else []
    if not sweeps and args.sweep_s > 0:
        sweeps = [in_child(best_matmul, args.device, args.sweep_s)]
    results["gemm_vs_best"] = _gemm_vs_best(all_rows, gemm["setup"] if gemm else {})
    _print_table(all_rows, sweeps, results["gemm_vs_best"], args)
    print(json.dumps({"bench": "workload_efficiency", **results}, default=float))
    return 0


def _cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def _row_json(row: Row) -> dict[str, Any]:
    data = asdict(row)
    data["soak_median"] = statistics.median(row.soak) if row.soak else None
    data["bare_median"] = statistics.median(row.bare) if row.bare else None
    data["ratio_median"] = row.ratio()
    data["of_best_median"] = row.of_best()
    data["of_best_own_median"] = row.of_best_own()
    return data


def _gemm_vs_best(rows: list[Row], setup: dict[str, Any]) -> dict[str, Any]:
    """Soak's GEMM against the best bare rate of each round's sweep: any dtype, and its own."""
    gemm = [r for r in rows if r.workload == "gemm" and r.best]
    if not gemm:
        return {}
    row = gemm[0]
    return {
        "dtype": setup.get("dtype"),
        "dtype_reason": setup.get("dtype_reason"),
        "n": setup.get("n"),
        "n_reason": setup.get("n_reason"),
        "soak_of_best": row.of_best(),
        "soak_of_best_own_dtype": row.of_best_own(),
        "rounds": len(row.best),
    }


def _print_table(
    rows: list[Row],
    sweeps: list[list[dict[str, Any]]],
    vs_best: dict[str, Any],
    args: argparse.Namespace,
) -> None:
    print(f"\nworkload efficiency on {args.device}: medians of soak/bare rounds")
    print(f"{'workload':9} {'part':6} {'soak':>12} {'bare':>12} {'soak/bare':>10}  rounds  goal")
    for row in rows:
        unit = row.unit + "/s"
        soak = f"{statistics.median(row.soak):.4g}" if row.soak else "-"
        bare = f"{statistics.median(row.bare):.4g}" if row.bare else "-"
        ratio = row.ratio()
        ratio_text = f"{ratio:.1%}" if ratio is not None else "info"
        goal = "" if ratio is None else ("ok" if ratio >= GOAL else "BELOW")
        print(
            f"{row.workload:9} {row.part:6} {soak:>12} {bare:>12} {ratio_text:>10}  "
            f"{len(row.soak):>6}  {goal}  [{unit}]"
        )
    for k, sweep in enumerate(sweeps):
        print(f"\nbare matmul rate (a @ b.T, FLOP/s), sweep {k + 1} of {len(sweeps)}:")
        for dtype in dict.fromkeys(r["dtype"] for r in sweep):
            cells = [
                f"n={r['n']}: {r['flop_s']:.4g}" if "flop_s" in r else f"n={r['n']}: n/a"
                for r in sweep
                if r["dtype"] == dtype
            ]
            print(f"  {dtype:5} " + "  ".join(cells))
    if vs_best:
        best, own = vs_best["soak_of_best"], vs_best["soak_of_best_own_dtype"]
        goal = "ok" if best is not None and best >= BEST_GOAL else "BELOW"
        print(
            f"\nsoak GEMM ({vs_best['dtype']}: {vs_best['dtype_reason']}; n={vs_best['n']}) is "
            f"{_pct(best)} of the best bare matmul rate of any dtype and size, {_pct(own)} of "
            f"the best in {vs_best['dtype']} (medians of {vs_best['rounds']} rounds; goal "
            f"{BEST_GOAL:.0%}: {goal})"
        )


def _pct(value: float | None) -> str:
    return "not available" if value is None else f"{value:.1%}"


if __name__ == "__main__":
    sys.exit(main())
