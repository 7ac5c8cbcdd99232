"""Issue 14 and 13 end to end: a protection event's place decides FAIL or WARN with its time
and duration in the message, and a telemetry-only store is judged on what it has."""

from __future__ import annotations

import re

import numpy as np
import pytest

from soak.analysis.checks import Status
from soak.model import DeviceInfo, Telemetry
from soak.pipeline import analyze
from soak.profile import Profile
from soak.runner import run
from soak.store import RunStore
from tests.factories import sim_config


def _run(tmp_path, fault: str) -> list:
    config = sim_config(tmp_path, duration_s=20 * 60, seed=3, sim_gpus=4, sim_faults=(fault,))
    result = run(config)
    store = RunStore.open(result.run_dir)
    try:
        return analyze(store, Profile()).devices
    finally:
        store.close_read()


@pytest.mark.slow
def test_a_brake_inside_the_warm_up_only_warns_and_one_after_it_fails(tmp_path):
    early = _run(tmp_path / "early", "power-brake:gpu=2:at=0:for=3")
    hw = [c for c in early[2].checks if c.check == "hw_events"]
    assert [c.status for c in hw] == [Status.WARN]
    assert "inside the warm-up" in hw[0].message and "for 3 s" in hw[0].message
    assert early[2].verdict == "PASS"
    late = _run(tmp_path / "late", "power-brake:gpu=2:at=60:for=3")
    hw = [c for c in late[2].checks if c.check == "hw_events"]
    assert [c.status for c in hw] == [Status.FAIL]
    # Seen from the first reading that shows it: within a tick of the injected time.
    pattern = r"HW power brake at 6[01] s into the load for [34] s \(reason bits 0x80\)"
    assert re.search(pattern, hw[0].message), hw[0].message


def _telemetry_only_store(path, gpus: int = 4) -> None:
    """What a telemetry-only import writes: devices, temperature, power, SM clock and
    utilisation over an hour, no work samples, and a run record that says so."""
    store = RunStore.create(path)
    store.set_meta(
        run={"backend": "import", "workload": None, "records_throughput": False},
        load_start_s=0.0,
        stop={"reason": "duration", "load_stop_s": 3600.0, "duration_s": 3600.0},
    )
    store.add_devices(
        DeviceInfo(index=i, backend="import", name="NVIDIA H100 80GB HBM3", slowdown_temp_c=87.0)
        for i in range(gpus)
    )
    for t in np.arange(0.0, 3600.0, 5.0):
        rows = [
            Telemetry(
                device=i,
                t_s=float(t),
                temp_c=float(round(40 + (25 + 2 * i) * (1 - np.exp(-t / 300)))),
                sm_clock_mhz=1980.0 - 60 * (1 - np.exp(-t / 300)),
                power_w=690.0,
                power_limit_w=700.0,
                util_pct=100.0,
            )
            for i in range(gpus)
        ]
        store.append(rows, [], [])
    store.commit()
    store.close()


@pytest.mark.slow
def test_a_telemetry_only_run_is_not_failed_for_the_throughput_it_never_recorded(tmp_path):
    path = tmp_path / "soak.sqlite"
    _telemetry_only_store(path)
    store = RunStore.open(path)
    try:
        analysis = analyze(store, Profile())
    finally:
        store.close_read()
    assert analysis.verdict == "PASS"
    assert {d.diagnosis for d in analysis.devices} == {"healthy"}
    not_checked = {(c.check, c.status) for c in analysis.not_checked}
    assert ("throughput_retention", Status.NOT_CHECKED) in not_checked
    assert not [c for c in analysis.reasons if "throughput" in c.message]
    clocks = [c for c in analysis.checks if c.check == "clock_retention"]
    assert {c.device for c in clocks} == {0, 1, 2, 3} and {c.status for c in clocks} == {
        Status.PASS
    }
    assert "power-capped drift" in clocks[0].message
    margins = [c for c in analysis.checks if c.check == "temp_margin"]
    assert margins and {c.status for c in margins} == {Status.PASS}
