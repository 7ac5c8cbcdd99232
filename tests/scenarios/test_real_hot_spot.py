"""The public H100 nanoGPT trace (bench/data/real-traces): one GPU runs hotter than its
seven peers at equal power; the hot-spot rule must name it, and only it."""

from __future__ import annotations

import csv
from datetime import datetime
from pathlib import Path

import pytest

from soak.analysis.checks import Status
from soak.model import DeviceInfo, Telemetry
from soak.pipeline import analyze
from soak.profile import Profile
from soak.store import RunStore
from testkit.traces import missing_reason, trace_dir

NAME = "h100x8-nanogpt-powercap-voltagepark"
TRACE = (trace_dir(NAME) or Path(NAME)) / "gpu_metrics_b443a1c3_22min.csv"


def _store(path: Path, load: tuple[float, float]) -> None:
    """The trace as a telemetry-only run (no clocks, reasons or throughput), its load the
    given span of seconds from the first sample."""
    with TRACE.open() as f:
        rows = list(csv.DictReader(f))
    t0 = datetime.fromisoformat(rows[0]["timestamp"].replace("Z", "+00:00"))
    store = RunStore.create(path)
    store.set_meta(
        run={"backend": "import", "workload": None, "records_throughput": False},
        load_start_s=load[0],
        stop={"reason": "duration", "load_stop_s": load[1], "duration_s": load[1] - load[0]},
    )
    store.add_devices(DeviceInfo(index=i, backend="import", name="unknown") for i in range(8))
    by_time: dict[float, list[Telemetry]] = {}
    for r in rows:
        t = (datetime.fromisoformat(r["timestamp"].replace("Z", "+00:00")) - t0).total_seconds()
        by_time.setdefault(t, []).append(
            Telemetry(
                device=int(r["gpu_index"]),
                t_s=t,
                temp_c=float(r["temperature_C"]),
                util_pct=float(r["utilization_gpu_percent"]),
                power_w=float(r["power_W"]),
            )
        )
    for t in sorted(by_time):
        store.append(by_time[t])
    store.commit()
    store.close()


@pytest.mark.slow
@pytest.mark.skipif(not TRACE.exists(), reason=missing_reason(NAME))
@pytest.mark.parametrize("load", [(150.0, 600.0), (700.0, 1080.0)], ids=["capped", "400W"])
def test_the_hot_gpu_of_the_h100_nanogpt_trace_is_named(tmp_path, load):
    path = tmp_path / "soak.sqlite"
    _store(path, load)
    store = RunStore.open(path)
    try:
        analysis = analyze(store, Profile())
    finally:
        store.close_read()
    hot = [c for c in analysis.checks if c.check == "hot_spot" and c.status is not Status.PASS]
    assert {c.device for c in hot} == {1}, hot
    assert {c.status for c in hot} == {Status.WARN}
    assert "above the server median" in hot[0].message and "margin 6 °C" in hot[0].message
    # a warning to act on, not a failure; on 7.5 and 6.3 min of load (under min_load_s, no
    # equilibrium), never a PASS either
    assert analysis.verdict == "INCOMPLETE"
    assert "hardware-fault" not in {d.diagnosis for d in analysis.devices}
