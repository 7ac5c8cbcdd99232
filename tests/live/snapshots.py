"""Hand-made ``Progress`` snapshots: the live views are tested without a run."""

from __future__ import annotations

from soak.model import ClockReason, Event, EventKind, Telemetry
from soak.progress import DeviceProgress, Phase, Progress, Rate


def device(
    index: int,
    t_s: float,
    temp_c: float | None = 61.0,
    rate: float = 6.5e14,
    reasons: int | None = int(ClockReason.SW_POWER_CAP),
    **kw,
) -> DeviceProgress:
    values = {
        "index": index,
        "name": "NVIDIA H100 80GB HBM3",
        "uuid": f"GPU-{index:04d}",
        "telemetry": Telemetry(
            index,
            t_s,
            temp_c=temp_c,
            sm_clock_mhz=1980.0,
            power_w=None,
            power_limit_w=700.0,
            clock_reasons=reasons,
            ecc_uncorrected=None,
            ecc_corrected=3,
        ),
        "rates": (Rate("gemm", rate, "FLOP"), Rate("membw", 3.1e12, "B")),
        "work_start_s": 10.0,
    }
    values.update(kw)
    return DeviceProgress(**values)


def snapshot(
    t_s: float,
    devices: tuple[DeviceProgress, ...] | None = None,
    events=(),
    inlet_c: float | None = None,
) -> Progress:
    return Progress(
        t_s=t_s,
        phase=Phase.LOAD,
        backend="sim",
        workload="mix",
        host="node1",
        planned_s=3600.0,
        until_steady=False,
        load_start_s=5.0,
        running_since_s=10.0,
        devices=devices if devices is not None else (device(0, t_s), device(1, t_s, None)),
        events=tuple(events),
        inlet_c=inlet_c,
    )


def xid(t_s: float, index: int) -> Event:
    return Event(t_s, EventKind.XID, "XID 79: GPU has fallen off the bus", index, {"code": 79})
