"""The report's view of synchronous training (``--workload ddp``): the ``server.ddp`` block
of ``summary.json`` and the rows of ``report.html``'s server table and rank table."""

from __future__ import annotations

from typing import Any

from soak.analysis.ddp_steps import SyncFacts
from soak.units import NOT_AVAILABLE, num, pct, si


def ddp_summary(sync: SyncFacts | None) -> dict[str, Any] | None:
    """``server.ddp`` of summary.json (docs/summary-schema.md); None without ddp steps."""
    if sync is None:
        return None
    steady = {r.device: r for r in sync.steady}
    return {
        "ranks": sync.ranks,
        "steps": sync.steps,
        "step_rate_unit": "samples/s",
        "cold_step_rate": sync.cold_rate,
        "steady_step_rate": sync.steady_rate,
        "step_rate_loss": sync.loss,
        "pace_setter": sync.pace_setter,
        "pace_share": {str(d): s for d, s in sorted(sync.pace_share.items())},
        "explanation": sync.explanation(),
        "loss_split": _loss_split(sync),
        "ranks_timing": [
            {
                "device": r.device,
                "cold_compute_s": r.compute_s,
                "cold_wait_s": r.wait_s,
                "steady_compute_s": steady[r.device].compute_s if r.device in steady else None,
                "steady_wait_s": steady[r.device].wait_s if r.device in steady else None,
            }
            for r in sync.cold
        ],
        "allreduce_b": sync.allreduce_b,
        "busbw_cold_Bps": sync.busbw_cold,
        "busbw_steady_Bps": sync.busbw_steady,
        "busbw_note": sync.busbw_note,
    }


def _loss_split(sync: SyncFacts) -> dict[str, Any] | None:
    s = sync.split
    if s is None:
        return None
    return {
        "device": s.device,
        "power_capped_drift": s.split.drift,
        "thermal": s.split.thermal,
        "unexplained": s.split.unexplained,
        "cold_sm_clock_mhz": s.cold_clock_mhz,
        "steady_sm_clock_mhz": s.steady_clock_mhz,
        "missing": s.missing or None,
    }


def ddp_context(sync: SyncFacts | None) -> dict[str, Any] | None:
    """The report's server row, rank rows and bus-bandwidth line, formatted."""
    if sync is None:
        return None
    steady = {r.device: r for r in sync.steady}
    ratio = None if sync.loss is None else 1.0 - sync.loss
    ranks = []
    for r in sync.cold:
        s = steady.get(r.device)
        ranks.append(
            {
                "device": r.device,
                "share": pct(sync.share_of(r.device), 0),
                "cold_compute": si(r.compute_s, "s"),
                "steady_compute": si(s.compute_s if s else None, "s"),
                "cold_wait": si(r.wait_s, "s"),
                "steady_wait": si(s.wait_s if s else None, "s"),
            }
        )
    if sync.ranks < 2:
        busbw = f"all-reduce bus bandwidth: skipped ({sync.busbw_note})"
    else:
        size = si(sync.allreduce_b, "B") if sync.allreduce_b else NOT_AVAILABLE
        busbw = (
            f"all-reduce bus bandwidth of a {size} buffer over {sync.ranks} ranks: cold "
            f"{si(sync.busbw_cold, 'B/s')}, steady {si(sync.busbw_steady, 'B/s')} "
            f"({sync.busbw_note})"
        )
    return {
        "cold": si(sync.cold_rate, "samples/s"),
        "steady": si(sync.steady_rate, "samples/s"),
        "ratio": pct(ratio),
        "loss": pct(sync.loss),
        "explanation": sync.explanation(),
        "ranks": ranks,
        "busbw": busbw,
        "steps": num(sync.steps, "d"),
    }
