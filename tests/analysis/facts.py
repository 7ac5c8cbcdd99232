"""Builders of window statistics and device facts for the check and diagnosis tests: a
healthy H100 running GEMM at its 700 W cap, changed one figure at a time."""

from __future__ import annotations

import dataclasses

from soak.analysis.checks import CounterSpan, DeviceFacts
from soak.analysis.equilibrium import Equilibrium
from soak.analysis.windows import Window, WindowStats
from soak.model import WorkerOutcome

NO_REASONS = {"sw_thermal": 0.0, "hw_slowdown": 0.0, "hw_thermal": 0.0, "hw_power_brake": 0.0}


def stats(
    start_s: float = 700.0,
    end_s: float = 1300.0,
    *,
    temp_c: float | None = 66.0,
    clock_mhz: float | None = 1700.0,
    mem_clock_mhz: float | None = 2619.0,
    power_w: float | None = 699.0,
    limit_w: float | None = 700.0,
    util_pct: float | None = 100.0,
    throughput: dict[str, float | None] | None = None,
    cv: float | None = 0.004,
    reasons: dict[str, float] | None = None,
    readable_reasons: bool = True,
) -> WindowStats:
    median = {
        "temp_c": temp_c,
        "mem_temp_c": None if temp_c is None else temp_c + 6,
        "sm_clock_mhz": clock_mhz,
        "mem_clock_mhz": mem_clock_mhz,
        "power_w": power_w,
        "power_limit_w": limit_w,
        "util_pct": util_pct,
        "mem_util_pct": 25.0,
    }
    p90 = {k: None if v is None else v + 1 for k, v in median.items()}
    p10 = {k: None if v is None else v - 1 for k, v in median.items()}
    rates = {"gemm": 7.0e14} if throughput is None else throughput
    share: dict[str, float | None]
    if readable_reasons:
        share = {"sw_power_cap": 1.0, **NO_REASONS, **(reasons or {})}
        share["hw_any"] = max(share["hw_slowdown"], share["hw_thermal"], share["hw_power_brake"])
    else:
        share = dict.fromkeys(["sw_power_cap", *NO_REASONS, "hw_any"])
    ticks = int(end_s - start_s)
    return WindowStats(
        Window(start_s, end_s),
        median,
        p10,
        p90,
        dict(rates),
        {p: cv for p in rates},
        {p: ticks for p in rates},
        share,
    )


def cold(**kw) -> WindowStats:
    return stats(15.0, 75.0, **{"temp_c": 45.0, "clock_mhz": 1755.0, **kw})


def facts(
    index: int = 0,
    *,
    cold_stats: WindowStats | None = None,
    steady: WindowStats | None = None,
    final: WindowStats | None = None,
    reached: bool = True,
    **changes,
) -> DeviceFacts:
    steady = steady if steady is not None else stats()
    cold_stats = cold_stats if cold_stats is not None else cold(throughput={"gemm": 7.2e14})
    base = DeviceFacts(
        index=index,
        name="NVIDIA H100 80GB HBM3",
        units={p: "FLOP" for p in steady.throughput},
        cold=cold_stats,
        steady=steady,
        whole=stats(10.0, 3610.0, throughput=steady.throughput),
        final=final,
        equilibrium=Equilibrium(reached, 700.0 if reached else None, "temperature", None, None),
        slowdown_temp_c=89.0,
        counters={
            "ecc_uncorrected": CounterSpan(0, 0, 0),
            "retired_pages": CounterSpan(None, None, None),
            "remap_pending": CounterSpan(0, 0, 0),
            "remap_failure": CounterSpan(0, 0, 0),
        },
        outcome=WorkerOutcome.OK,
        verification_checked=360,
        workload="gemm",
        power_limit_w=700.0,
        default_power_limit_w=700.0,
    )
    return dataclasses.replace(base, **changes)


def server(count: int = 8, **changes_by_index) -> list[DeviceFacts]:
    """``count`` healthy devices a little apart (the silicon lottery), some changed:
    ``server(8, d3=dict(steady=...))``."""
    out = []
    for i in range(count):
        spread = 1 + 0.004 * (i - count / 2)
        steady = stats(clock_mhz=1700 * spread, throughput={"gemm": 7.0e14 * spread})
        device = facts(
            i,
            steady=steady,
            cold_stats=cold(clock_mhz=1755 * spread, throughput={"gemm": 7.2e14 * spread}),
        )
        out.append(dataclasses.replace(device, **changes_by_index.get(f"d{i}", {})))
    return out
