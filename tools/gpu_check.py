"""The GPU check: one short script for a machine with an NVIDIA GPU (``make gpu-check``).

In one run, within 8 minutes:
  (a) measures the best bf16 matmul rate torch reaches here (a sweep of sizes, random data,
      CUDA-event timing, median of repeats) and the device-to-device copy bandwidth
      (bytes read + bytes written);
  (b) runs ``soak run --backend nvml`` for a few minutes with ``gemm`` and then ``membw``;
  (c) reports soak's figures as ratios of (a), and the average power under load as a ratio
      of the enforced power limit;
  (c') during the gemm soak, studies the SM clock for 10 s: reads every 10 ms and the
      driver's own clock samples (``clock_study``), for the design of the clock's reading;
  (d) saves the telemetry traces (the run stores) and the raw NVML answers of the probe as
      fixtures the tests replay (tests/fixtures/gpu/).
With ``--cold-minutes M`` it first runs a from-cold soak of the default workload (``mix``),
before anything warms the card, and studies the clock under that load instead. A lease whose
calls are shorter than that soak splits it in two: ``--cold-minutes 11 --detach 520`` starts
it in its own session, studies the clock, leaves a copy of the store so far in OUT and
returns after 520 s; ``--collect`` (the next call, on the same machine) waits for it, brings
its store, summary and log into OUT, and goes on with (a) to (d).
Results are written after every stage, so a run cut short still leaves what it measured.
It never changes clocks, power limits or modes: it measures the card as it finds it.
``--backend cpu`` is a dry run of the same steps on a machine without a GPU.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
CLOCK_STUDY_AT_S = 60.0  # into a soak: its load is on by then (workers start in 20-40 s)
COLD_BASELINE_S = 20  # the cold soak's idle baseline, seconds


def timed(torch: Any, device: str, fn: Callable[[], object]) -> float:
    """Seconds one call of ``fn`` takes: CUDA events on a GPU, perf_counter elsewhere."""
    if device.startswith("cuda"):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def sync(torch: Any, device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def best_matmul(torch: Any, device: str, sizes: list[int], dtype_name: str, reps: int = 10) -> dict:
    """Best matmul FLOP/s over square sizes on random data; per size 3 warm-ups, median."""
    dtype = getattr(torch, dtype_name)
    rates = {}
    for n in sizes:
        a = torch.randn(n, n, device=device, dtype=dtype)
        b = torch.randn(n, n, device=device, dtype=dtype)
        out = torch.empty(n, n, device=device, dtype=dtype)

        def product(a: Any = a, b: Any = b, out: Any = out) -> None:
            torch.matmul(a, b, out=out)

        for _ in range(3):
            product()
        sync(torch, device)
        times = [timed(torch, device, product) for _ in range(reps)]
        rates[n] = 2 * n**3 / float(np.median(times))
        del a, b, out, product
    best = max(rates, key=lambda n: rates[n])
    return {
        "dtype": dtype_name,
        "by_size": {str(n): r for n, r in rates.items()},
        "best_n": best,
        "best_flops": rates[best],
    }


def copy_bandwidth(torch: Any, device: str, gib: float, reps: int = 10) -> dict:
    """Device-to-device copy, counting bytes read plus bytes written."""
    n = int(gib * 2**30)
    src = torch.randint(0, 255, (n,), dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    sync(torch, device)
    times = [timed(torch, device, lambda: dst.copy_(src)) for _ in range(reps)]
    verified = bool(torch.equal(src[:: 2**16], dst[:: 2**16]))
    median = float(np.median(times))
    return {"bytes": 2 * n, "median_s": median, "bytes_per_s": 2 * n / median, "verified": verified}


def _lag_correlation(x: np.ndarray, lag: int) -> float | None:
    if x.size <= lag + 2 or np.std(x) == 0:
        return None
    return float(np.corrcoef(x[:-lag], x[lag:])[0, 1])


def _sd(x: np.ndarray) -> float | None:
    return float(np.std(x, ddof=1)) if x.size > 1 else None


def clock_study(pynvml: Any, index: int = 0, seconds: float = 10.0, every_s: float = 0.01) -> dict:
    """How the SM clock moves under load, for the design of its reading: ``seconds`` of
    instantaneous reads every ``every_s``, and the driver's own clock samples
    (``nvmlDeviceGetSamples(NVML_PROCESSOR_CLK_SAMPLES)``) over the same seconds.

    soak reads the clock once per 1-s tick; at a power cap that read scattered 11 % with no
    correlation from one tick to the next (H200, 2026-12-04), so a 5-min level cannot be
    known to 1 %. What this measures decides the better reading: ``one_s_mean_sd`` against
    ``one_read_per_s_sd`` is what averaging fast reads within a tick would gain, and the
    samples say whether the driver keeps a finer record to average instead."""
    from soak.devices.nvml import _VALUE_MEMBER

    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    out: dict[str, Any] = {"seconds": seconds, "every_s": every_s}
    kind = pynvml.NVML_PROCESSOR_CLK_SAMPLES
    try:
        _, earlier = pynvml.nvmlDeviceGetSamples(handle, kind, 0)
        last_seen: int | None = max((int(e.timeStamp) for e in earlier), default=0)
    except pynvml.NVMLError as exc:
        last_seen, out["samples"] = None, {"error": str(exc)}
    t, mhz = [], []
    start = time.monotonic()
    while (now := time.monotonic()) - start < seconds:
        t.append(now - start)
        mhz.append(float(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)))
        time.sleep(max(0.0, start + len(t) * every_s - time.monotonic()))
    reads, at = np.array(mhz), np.array(t)
    whole = np.floor(at).astype(int)
    seconds_seen = np.unique(whole)
    per_s = [reads[whole == k] for k in seconds_seen]
    out["reads"] = {
        "n": int(reads.size),
        "mean_mhz": float(reads.mean()),
        "sd_mhz": _sd(reads),
        "lag1_corr": _lag_correlation(reads, 1),
        "lag_100ms_corr": _lag_correlation(reads, max(1, round(0.1 / every_s))),
        "one_s_mean_sd": _sd(np.array([r.mean() for r in per_s])),
        "one_read_per_s_sd": _sd(np.array([r[0] for r in per_s])),
        "mhz": [int(v) for v in reads],
    }
    if last_seen is not None:
        value_type, samples = pynvml.nvmlDeviceGetSamples(handle, kind, last_seen)
        member = _VALUE_MEMBER.get(int(value_type), "uiVal")
        stamps = np.array([int(x.timeStamp) for x in samples], dtype=float) / 1e6
        values = np.array([float(getattr(x.sampleValue, member)) for x in samples])
        out["samples"] = {
            "n": int(values.size),
            "median_spacing_s": float(np.median(np.diff(stamps))) if stamps.size > 1 else None,
            "mean_mhz": float(values.mean()) if values.size else None,
            "sd_mhz": _sd(values),
            "mhz": [int(v) for v in values],
        }
    return out


def clock_study_later(delay_s: float) -> Callable[[], dict]:
    """``clock_study`` of device 0 in a thread, ``delay_s`` from now (under the soak's load);
    returns a function that waits for its result."""
    box: dict[str, Any] = {}

    def work() -> None:
        time.sleep(delay_s)
        import pynvml

        try:
            pynvml.nvmlInit()
            try:
                box.update(clock_study(pynvml))
            finally:
                pynvml.nvmlShutdown()
        except Exception as exc:  # the study is an extra: it must not lose the check's figures
            box["error"] = f"{type(exc).__name__}: {exc}"

    thread = threading.Thread(target=work, name="clock-study", daemon=True)
    thread.start()

    def result() -> dict:
        thread.join(timeout=delay_s + 120)
        return box or {"error": "the study did not finish"}

    return result


SOAK_ENV = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")


def soak_command(
    backend: str, workload: str, minutes: float, baseline_s: float, out: Path
) -> list[str]:
    """``soak run`` as an operator would type it, seed 1."""
    return [
        sys.executable, "-m", "soak", "run", "--backend", backend, "--workload", workload,
        "--minutes", str(minutes), "--baseline", str(baseline_s), "--out", str(out),
        "--seed", "1",
    ]  # fmt: skip


def start_cold_soak(backend: str, minutes: float, work: Path) -> dict[str, Any]:
    """Start ``soak run`` of the default workload on the card as found, in its own process
    session so that it outlives this script (``--detach``); its state goes to ``work``."""
    runs = work / "runs"
    shutil.rmtree(runs, ignore_errors=True)
    cmd = soak_command(backend, "mix", minutes, COLD_BASELINE_S, runs)
    print("gpu-check: cold soak:", " ".join(cmd), flush=True)
    with (work / "cold.out").open("w") as stdout, (work / "cold.log").open("w") as stderr:
        proc = subprocess.Popen(
            cmd, stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL, env=SOAK_ENV, cwd=ROOT,
            start_new_session=True,
        )  # fmt: skip
    state = {"pid": proc.pid, "runs": str(runs), "minutes": minutes, "started": time.time()}
    (work / "cold.json").write_text(json.dumps(state))
    return state


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(ChildProcessError):  # ours: reap it if it has ended
        return os.waitpid(pid, os.WNOHANG)[0] == 0
    return True


def wait_cold_soak(state: dict[str, Any], limit_s: float) -> bool:
    """Wait up to ``limit_s`` for the cold soak to end; whether it did."""
    deadline = time.monotonic() + limit_s
    while _alive(state["pid"]):
        if time.monotonic() > deadline:
            return False
        time.sleep(1.0)
    return True


def cold_store(state: dict[str, Any]) -> Path | None:
    stores = sorted(Path(state["runs"]).glob("*/*/soak.sqlite"))
    return stores[0] if stores else None


def snapshot_cold_soak(state: dict[str, Any], work: Path, out: Path) -> None:
    """A consistent copy of the cold soak's store so far, and its log, into ``out``."""
    store = cold_store(state)
    if store is not None:
        source, copy = sqlite3.connect(store), sqlite3.connect(out / "cold_partial.sqlite")
        try:
            source.backup(copy)
        finally:
            copy.close()
            source.close()
    shutil.copy(work / "cold.log", out / "cold.log")


def collect_cold_soak(state: dict[str, Any], work: Path, out: Path) -> dict[str, Any]:
    """The ended cold soak's figures; its store, summary and log copied into ``out``."""
    shutil.copy(work / "cold.log", out / "cold.log")
    store = cold_store(state)
    if store is None or not (store.parent / "summary.json").is_file():
        return {"error": "the cold soak left no summary; its log is cold.log"}
    for name, as_name in (("soak.sqlite", "cold.sqlite"), ("summary.json", "cold_summary.json")):
        shutil.copy(store.parent / name, out / as_name)
    return soak_figures(store.parent)


def run_soak(backend: str, workload: str, minutes: float, out: Path, log: Path) -> Path | None:
    """Run soak as an operator would; returns the run folder, or None if it did not finish."""
    cmd = soak_command(backend, workload, minutes, 3, out)
    print("gpu-check:", " ".join(cmd), flush=True)
    with log.open("w") as f:
        proc = subprocess.run(
            cmd, stdout=subprocess.PIPE, stderr=f, text=True, env=SOAK_ENV, cwd=ROOT,
            timeout=minutes * 60 + 240,
        )  # fmt: skip
    print(proc.stdout, flush=True)
    lines = proc.stdout.strip().splitlines()
    last = lines[-1] if lines else ""
    # a verdict of any kind: a few minutes of load are INCOMPLETE (3), too short to judge
    # (min_load_s), and their figures are what this check measures
    if proc.returncode not in (0, 1, 3) or not last.endswith("report.html"):
        print(f"gpu-check: soak run {workload} exited {proc.returncode}; log tail:", flush=True)
        print(log.read_text()[-3000:], flush=True)
        return None
    return Path(last).parent


def soak_figures(run_dir: Path) -> dict:
    """Soak's own figures for device 0: throughput over the load after 20 s of warm-up, the
    summary's cold and steady figures, mean power and the enforced limit."""
    from soak.store import RunStore

    summary = json.loads((run_dir / "summary.json").read_text())
    store = RunStore.open(run_dir)
    try:
        info = store.devices()[0]
        tele = store.telemetry(info.index)
        work = store.work(info.index)
    finally:
        store.close_read()
    part = next(iter(work))
    w = work[part]
    start = float(w["t_start_s"].min())
    keep = w["t_start_s"] >= start + 20
    rate = float(w["work"][keep].sum() / (w["t_end_s"][keep] - w["t_start_s"][keep]).sum())
    loaded = tele["t_s"] >= start + 20

    def mean(key: str) -> float | None:
        values = tele[key][loaded]
        return float(np.nanmean(values)) if np.isfinite(values).any() else None

    def peak(key: str) -> float | None:
        values = tele[key][loaded]
        return float(np.nanmax(values)) if np.isfinite(values).any() else None

    device = summary["devices"][0]
    return {
        "equilibrium": device.get("equilibrium"),
        "run_dir": run_dir.name,
        "part": part,
        "rate": rate,
        "cold": device["cold"]["throughput"].get(part),
        "steady": device["steady"]["throughput"].get(part),
        "mean_power_w": mean("power_w"),
        "power_limit_w": mean("power_limit_w") or info.power_limit_w,
        "mean_sm_clock_mhz": mean("sm_clock_mhz"),
        "max_temp_c": peak("temp_c"),
        "verdict": summary["verdict"],
        "reasons": summary["reasons"],
        "verified": int(np.sum(w["verified"] == 1)),
        "verify_failed": int(np.sum(w["verified"] == 0)),
    }


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=Path(os.environ.get("OUT", "gpu-check")),
        help="folder the results go to (default: $OUT, else gpu-check/)",
    )  # fmt: skip
    parser.add_argument(
        "--cold-minutes", type=float, default=0.0,
        help="first, before anything warms the card: a soak of the default workload (mix) "
        "of this many minutes of load after a 20-s idle baseline (default 0: none)",
    )  # fmt: skip
    parser.add_argument(
        "--detach", type=float, metavar="S",
        help="with --cold-minutes: return S seconds after starting the cold soak, leaving it "
        "running in its own session (a copy of its store so far in OUT); finish with "
        "--collect (default: wait for it)",
    )  # fmt: skip
    parser.add_argument(
        "--collect", action="store_true",
        help="wait for a detached cold soak, bring its run into OUT, then the rest",
    )  # fmt: skip
    parser.add_argument(
        "--work", type=Path, default=Path("/tmp/soak-gpu-check"),
        help="where a detached cold soak keeps its run (default /tmp/soak-gpu-check)",
    )  # fmt: skip
    parser.add_argument(
        "--gemm-minutes", type=float, default=2.5,
        help="gemm soak, minutes of load; 0 skips it (default 2.5)",
    )  # fmt: skip
    parser.add_argument(
        "--membw-minutes", type=float, default=1.5,
        help="membw soak, minutes of load; 0 skips it (default 1.5)",
    )  # fmt: skip
    parser.add_argument("--backend", default="nvml", help="cpu: a dry run without a GPU")
    args = parser.parse_args()
    if args.detach is not None and args.cold_minutes <= 0:
        parser.error("--detach needs --cold-minutes")
    if args.collect and args.cold_minutes > 0:
        parser.error("--collect finishes an earlier --cold-minutes run; give one or the other")
    return args


def cold_stage(args: argparse.Namespace, gpu: bool, result: dict, save: Callable) -> bool:
    """The from-cold soak: started, or collected. False where the check stops here."""
    out, work = args.out, args.work
    if args.collect:
        state_file = work / "cold.json"
        if not state_file.is_file():
            result["cold"] = {"error": f"no detached cold soak in {work}"}
            return False
        state = json.loads(state_file.read_text())
        earlier = work / "gpu_check.json"
        if earlier.is_file():
            result["clock_study"] = json.loads(earlier.read_text()).get("clock_study")
        limit = state["minutes"] * 60 + 300 - (time.time() - state["started"])
        if not wait_cold_soak(state, max(limit, 60.0)):
            result["cold"] = {"error": "the cold soak is still running"}
            return False
        result["cold"] = collect_cold_soak(state, work, out)
        save()
        return True
    work.mkdir(parents=True, exist_ok=True)
    state = start_cold_soak(args.backend, args.cold_minutes, work)
    study = clock_study_later(COLD_BASELINE_S + CLOCK_STUDY_AT_S) if gpu else None
    if args.detach is not None:
        time.sleep(max(0.0, state["started"] + args.detach - time.time()))
        if study is not None:
            result["clock_study"] = study()
        snapshot_cold_soak(state, work, out)
        result["cold"] = {"detached": state}
        save()
        shutil.copy(out / "gpu_check.json", work / "gpu_check.json")
        print(f"gpu-check: cold soak running (pid {state['pid']}); finish with --collect")
        return False
    done = wait_cold_soak(state, args.cold_minutes * 60 + 300)
    if study is not None:
        result["clock_study"] = study()
    result["cold"] = collect_cold_soak(state, work, out) if done else {"error": "did not end"}
    save()
    return True


def main() -> int:
    args = parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    sys.path.insert(0, str(ROOT))

    import torch

    gpu = args.backend == "nvml"
    if gpu and not torch.cuda.is_available():
        print("gpu-check: no CUDA device visible to torch", file=sys.stderr)
        return 2
    device = "cuda:0" if gpu else "cpu"
    result: dict[str, Any] = {
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "backend": args.backend,
        "device": torch.cuda.get_device_name(0) if gpu else "cpu",
    }

    def save() -> None:
        result["wall_s"] = time.monotonic() - started
        (out / "gpu_check.json").write_text(json.dumps(result, indent=1, default=str))

    if gpu and not args.collect:
        from soak.devices import nvml

        (out / "nvml_probe.json").write_text(json.dumps(nvml.probe_raw(), indent=1, default=str))
        print("gpu-check: NVML probe saved", flush=True)
    if (args.cold_minutes > 0 or args.collect) and not cold_stage(args, gpu, result, save):
        save()
        report(result)
        return 0 if "detached" in result.get("cold", {}) else 1
    ceilings(torch, device, gpu, result)
    save()
    runs = out / "runs"
    for workload, minutes, ceiling in (
        ("gemm", args.gemm_minutes, result["matmul"]["best_flops"]),
        ("membw", args.membw_minutes, result["copy"]["bytes_per_s"]),
    ):
        if minutes <= 0:
            continue
        study = None
        long_enough = minutes * 60 >= CLOCK_STUDY_AT_S + 30
        if gpu and workload == "gemm" and long_enough and "clock_study" not in result:
            study = clock_study_later(CLOCK_STUDY_AT_S)
        run_dir = run_soak(args.backend, workload, minutes, runs, out / f"soak_{workload}.log")
        if study is not None:
            result["clock_study"] = study()
            save()
        if run_dir is None:
            result[workload] = {"error": "soak run did not finish"}
            save()
            continue
        figures = soak_figures(run_dir)
        figures["ratio_to_torch_best"] = figures["rate"] / ceiling
        if figures["mean_power_w"] and figures["power_limit_w"]:
            figures["power_ratio"] = figures["mean_power_w"] / figures["power_limit_w"]
        result[workload] = figures
        shutil.copy(run_dir / "soak.sqlite", out / f"{workload}.sqlite")
        save()
    shutil.rmtree(runs, ignore_errors=True)
    save()
    report(result)
    asked = [w for w, m in (("gemm", args.gemm_minutes), ("membw", args.membw_minutes)) if m > 0]
    cold_ok = "rate" in result.get("cold", {}) or not (args.cold_minutes > 0 or args.collect)
    return 0 if cold_ok and all("rate" in result.get(w, {}) for w in asked) else 1


def ceilings(torch: Any, device: str, gpu: bool, result: dict[str, Any]) -> None:
    """torch's own best here: the matmul sweep and the device-to-device copy."""
    if gpu:
        sizes, dtype, gib = [4096, 8192, 12288, 16384], "bfloat16", 4.0
    else:
        sizes, dtype, gib = [512, 1024], "float32", 0.25
    result["matmul"] = best_matmul(torch, device, sizes, dtype)
    result["copy"] = copy_bandwidth(torch, device, gib)
    print(
        f"gpu-check: best {dtype} matmul {result['matmul']['best_flops'] / 1e12:.1f} TFLOP/s "
        f"(n={result['matmul']['best_n']}), copy {result['copy']['bytes_per_s'] / 1e12:.3f} TB/s",
        flush=True,
    )
    if gpu:
        torch.cuda.empty_cache()


def report(result: dict[str, Any]) -> None:
    print("\n== gpu-check ==")
    print(f"device {result['device']}, torch {result['torch']}, CUDA {result['cuda']}")
    cold = result.get("cold")
    if cold is not None:
        print(f"cold soak (mix): {_cold_line(cold)}")
    study = result.get("clock_study")
    if study is not None:
        print(f"SM clock study: {_study_line(study)}")
    if "matmul" in result:
        print(f"torch best matmul {result['matmul']['best_flops'] / 1e12:10.2f} TFLOP/s")
        print(f"torch d2d copy    {result['copy']['bytes_per_s'] / 1e12:10.3f} TB/s")
    for workload in ("gemm", "membw"):
        r = result.get(workload)
        if r is None:
            continue
        if "rate" not in r:
            print(f"soak {workload:5}: {r.get('error', 'missing')}")
            continue
        power = r.get("power_ratio")
        power_text = "n/a" if power is None else f"{100 * power:.1f} % of limit"
        print(
            f"soak {workload:5}: {r['rate']:.4g} {r['part']}/s = "
            f"{100 * r['ratio_to_torch_best']:.1f} % of torch's best; power {power_text}; "
            f"verified {r['verified']} / failed {r['verify_failed']}; verdict {r['verdict']}"
        )
    print(f"wall {result['wall_s']:.0f} s")


def _cold_line(cold: dict[str, Any]) -> str:
    if "detached" in cold:
        return f"running (pid {cold['detached']['pid']}); finish with --collect"
    if "rate" not in cold:
        return str(cold.get("error", "missing"))
    eq = cold.get("equilibrium") or {}
    reached = "reached" if eq.get("reached") else "not reached"
    peak = cold["max_temp_c"]
    peak_text = "n/a" if peak is None else f"{peak:.0f} °C"
    return (
        f"{cold['rate']:.4g} {cold['part']}/s; peak {peak_text}; equilibrium {reached}; "
        f"verified {cold['verified']} / failed {cold['verify_failed']}; verdict {cold['verdict']}"
    )


def _study_line(study: dict[str, Any]) -> str:
    reads = study.get("reads")
    if reads is None:
        return str(study.get("error", "missing"))

    def mhz(key: str) -> str:  # None where too few reads to say
        return "n/a" if reads[key] is None else f"{reads[key]:.0f} MHz"

    text = (
        f"{reads['n']} reads every {1000 * study['every_s']:.0f} ms, mean {mhz('mean_mhz')}, "
        f"sd {mhz('sd_mhz')}; 1-s means sd {mhz('one_s_mean_sd')} against one read a second "
        f"{mhz('one_read_per_s_sd')}"
    )
    samples = study.get("samples", {})
    if "error" in samples:
        return f"{text}; driver samples: {samples['error']}"
    return f"{text}; driver samples {samples['n']}, every {samples['median_spacing_s']} s"


if __name__ == "__main__":
    sys.exit(main())
