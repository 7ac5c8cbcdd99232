"""The NVML backend through the whole run, on a fake pynvml: what the stored run, the
capability table and the verdict say for each failure a real server can show."""

import math

import numpy as np
import pynvml
import pytest

from soak.clock import VirtualClock
from soak.config import RunConfig
from soak.devices.base import LoadUpdate
from soak.devices.nvml import NvmlBackend
from soak.model import ClockReason, Event, EventKind, WorkerOutcome, WorkSample
from soak.pipeline import build_outputs
from soak.runner import Runner, Stopper
from soak.store import RunStore
from tests.devices.fake_pynvml import FakeNvml, baseline_gpu, err, fv
from tests.factories import any_length

FI = "nvmlDeviceGetFieldValues"
LOSE_AT_S, XID_AT_S = 120.0, 200.0


class SteadyLoad:
    """A load that finishes 1 s of constant-rate GEMM per tick on every device still alive,
    and loses GPU 2 / raises XID 79 on GPU 3 at fixed times, as a failing server would."""

    def __init__(self, fake: FakeNvml) -> None:
        self.fake = fake
        self.last = 0.0
        self.dead: set[int] = set()
        self.energy_mj = dict.fromkeys(range(4), 5_000_000_000.0)

    def start(self, t0: float) -> None:
        self.last = None

    def poll(self, t_s: float) -> LoadUpdate:
        if t_s >= LOSE_AT_S and 2 not in self.dead:
            self.fake.lose(2)
            self.dead.add(2)
        if t_s >= XID_AT_S and 3 not in self.dead:
            self.fake.push_event(3, pynvml.nvmlEventTypeXidCriticalError, 79)
            self.fake.wait_handled(1)  # the event thread is real: wait until it has it
            self.dead.add(3)
        start, self.last = self.last, t_s
        if start is None:
            return LoadUpdate()
        work = 7e14 * (t_s - start)
        alive = [d for d in range(4) if d not in self.dead]
        for d in alive:  # a loaded GPU's power and energy move; readings that hold still froze
            mw = 650_000 + 1_000 * (int(t_s) % 7)
            self.fake.set(d, "nvmlDeviceGetPowerUsage()", mw)
            self.fake.set(d, f"{FI}(NVML_FI_DEV_POWER_AVERAGE)", fv(mw, 1))
            if d != 0:  # GPU 0 has no energy counter
                self.energy_mj[d] += mw * (t_s - start)
                self.fake.set(d, "nvmlDeviceGetTotalEnergyConsumption()", int(self.energy_mj[d]))
                energy = fv(int(self.energy_mj[d]))
                self.fake.set(d, f"{FI}(NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION)", energy)
        return LoadUpdate([WorkSample(d, start, t_s, "gemm", work, "FLOP", True) for d in alive])

    def stop(self, t_s: float) -> LoadUpdate:
        def outcome(d: int) -> str:
            return (WorkerOutcome.DEVICE_LOST if d in self.dead else WorkerOutcome.OK).value

        events = [
            Event(t_s, EventKind.WORKER_OUTCOME, "end", d, {"outcome": outcome(d)})
            for d in range(4)
        ]
        return LoadUpdate(events=events)

    def kill(self, t_s: float) -> LoadUpdate:
        return self.stop(t_s)

    def failed_devices(self) -> frozenset[int]:
        return frozenset(self.dead)


@pytest.fixture(scope="module")
def stored_run(tmp_path_factory):
    # One run for the module: every test reads it, none changes it.
    with pytest.MonkeyPatch.context() as monkeypatch:
        yield _stored_run(tmp_path_factory.mktemp("nvml-run"), monkeypatch)


def _stored_run(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    tables = [baseline_gpu(i) for i in range(4)]
    tables[0].update({
        "nvmlDeviceGetCurrentClocksEventReasons()": 0x8 | 0x40 | 0x4 | 0x1000,
        "nvmlDeviceGetFanSpeed()": 35,
        "nvmlDeviceGetTotalEnergyConsumption()": err("NotSupported"),
        f"{FI}(NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION)": err("NotSupported"),
    })  # fmt: skip
    tables[1].update({
        f"{FI}(NVML_FI_DEV_MEMORY_TEMP)": fv(9.2e18),
        "nvmlDeviceGetFanSpeed()": err("NotSupported"),
    })  # fmt: skip
    fake = FakeNvml(tables)
    monkeypatch.setattr("soak.devices.nvml.pynvml", fake)
    clock = VirtualClock(1000.0)
    backend = NvmlBackend(time_fn=clock.now, event_wait_ms=10)
    load = SteadyLoad(fake)
    monkeypatch.setattr("soak.runner.make_load", lambda config, backend, devices: load)
    # six minutes judged as if they were enough (min_load_s 0): what the NVML backend
    # stores is what is tested, not the length
    config = RunConfig(backend="nvml", workload="gemm", duration_s=360.0, baseline_s=5.0,
                       out=tmp_path, profile=any_length())  # fmt: skip
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    try:
        Runner(config, backend, clock, run_dir).run(Stopper())
    finally:
        backend.close()
    analysis, _ = build_outputs(run_dir, config.profile)
    return RunStore.open(run_dir), analysis


def test_capability_table_is_stored_per_device(stored_run):
    store, _ = stored_run
    caps = store.capabilities()
    assert caps[1]["fan_pct"] == "not supported" and caps[0]["fan_pct"] == "supported"
    assert caps[0]["energy_j"] == "fallback" and caps[1]["energy_j"] == "supported"
    assert caps[0]["xid_events"] == "supported"


def test_unreadable_values_are_stored_as_null_never_zero(stored_run):
    store, _ = stored_run
    gpu1 = store.telemetry(1)
    assert np.isnan(gpu1["mem_temp_c"]).all()  # 9.2e18 sentinel
    assert np.isnan(gpu1["fan_pct"]).all()
    assert np.isfinite(store.telemetry(0)["fan_pct"]).all()
    energy = store.telemetry(0)["energy_j"]  # integrated from power: rises, never NaN after start
    assert np.all(np.diff(energy[np.isfinite(energy)]) >= 0) and np.isfinite(energy[-1])


def test_combined_reason_bits_round_trip_and_fail_the_device(stored_run):
    store, analysis = stored_run
    bits = int(store.telemetry(0)["clock_reasons"][-1])
    assert bits & ClockReason.HW_SLOWDOWN and bits & ClockReason.HW_THERMAL and bits & 0x1000
    assert "unknown:0x1000" in ClockReason(bits).names()
    gpu0 = analysis.devices[0]
    assert gpu0.verdict == "FAIL"
    events = [c for c in gpu0.checks if c.check == "hw_events" and c.status == "fail"]
    assert events and "HW slowdown/HW thermal slowdown at " in events[0].message


def test_lost_gpu_has_one_event_and_no_telemetry_after_it(stored_run):
    store, analysis = stored_run
    lost = [e for e in store.events() if e.kind is EventKind.DEVICE_LOST and e.device == 2]
    assert len(lost) == 1 and lost[0].t_s == pytest.approx(LOSE_AT_S, abs=1.5)
    assert store.telemetry(2)["t_s"].max() < LOSE_AT_S + 1.5
    assert store.telemetry(1)["t_s"].max() > 360  # the others went on
    assert analysis.devices[2].verdict == "FAIL"


def test_xid_79_is_stored_fails_the_device_and_names_the_code(stored_run):
    store, analysis = stored_run
    xids = [e for e in store.events() if e.kind is EventKind.XID]
    assert [(e.device, e.details["code"]) for e in xids] == [(3, 79)]
    assert any(e.kind is EventKind.DEVICE_LOST and e.device == 3 for e in store.events())
    gpu3 = analysis.devices[3]
    assert gpu3.verdict == "FAIL" and gpu3.diagnosis == "hardware-fault"
    assert any(c.check == "xid" and "79" in c.message for c in gpu3.checks)
    assert analysis.devices[1].verdict == "PASS"
    assert not math.isnan(analysis.devices[1].facts.steady.median["temp_c"])
