"""NvmlBackend against a fake pynvml built from per-GPU scenario tables.

Each scenario is named after the failure it reproduces; the fake answers everything else like
a healthy H100 (`fake_pynvml.baseline_gpu`).
"""

from __future__ import annotations

import logging
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pynvml
import pytest
from hypothesis import given
from hypothesis import strategies as st

from soak.devices import nvml
from soak.devices.nvml import METRICS, NvmlBackend, probe_raw
from soak.errors import BackendUnavailable, ConfigError
from soak.model import HW_REASONS, TELEMETRY_METRICS, Capability, ClockReason, EventKind
from tests.devices.conftest import by_device, scenario_tables
from tests.devices.fake_pynvml import (
    MISSING_FUNCTION,
    FakeNvml,
    baseline_gpu,
    err,
    fv,
)

FI = "nvmlDeviceGetFieldValues"
XID = pynvml.nvmlEventTypeXidCriticalError

# scenario name → {gpu: {read: answer}}
SCENARIOS: dict[str, dict[int, dict[str, Any]]] = {
    "healthy": {},
    "fan_not_supported_on_gpu1": {
        0: {"nvmlDeviceGetFanSpeed()": 35},
        1: {"nvmlDeviceGetFanSpeed()": err("NotSupported")},
    },
    "hbm_temp_field_not_supported_on_gpu0": {
        0: {f"{FI}(NVML_FI_DEV_MEMORY_TEMP)": err("NotSupported")},
    },
    "hbm_temp_sentinels": {
        0: {f"{FI}(NVML_FI_DEV_MEMORY_TEMP)": fv(0, 1)},
        1: {f"{FI}(NVML_FI_DEV_MEMORY_TEMP)": fv(9.2e18)},
    },
    "hw_slowdown_and_hw_thermal_with_unknown_bit": {
        0: {"nvmlDeviceGetCurrentClocksEventReasons()": 0x8 | 0x40 | 0x4 | 0x1000},
    },
    "no_permission_for_ecc_on_gpu0": {
        0: {
            f"{FI}(NVML_FI_DEV_ECC_SBE_VOL_TOTAL)": err("NoPermission"),
            f"{FI}(NVML_FI_DEV_ECC_DBE_VOL_TOTAL)": err("NoPermission"),
            "nvmlDeviceGetTotalEccErrors(NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC)": err(
                "NoPermission"
            ),
            "nvmlDeviceGetTotalEccErrors(NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC)": (
                err("NoPermission")
            ),
        },
    },
    "energy_counter_not_supported": {
        gpu: {
            "nvmlDeviceGetTotalEnergyConsumption()": err("NotSupported"),
            f"{FI}(NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION)": err("NotSupported"),
        }
        for gpu in (0, 1)
    },
    "old_driver_without_event_reasons_symbol": {
        gpu: {"nvmlDeviceGetCurrentClocksEventReasons()": err("FunctionNotFound")} for gpu in (0, 1)
    },
    "old_binding_without_newer_functions": {
        gpu: {
            "nvmlDeviceGetCurrentClocksEventReasons()": MISSING_FUNCTION,
            "nvmlDeviceGetTemperatureV(NVML_TEMPERATURE_GPU)": MISSING_FUNCTION,
        }
        for gpu in (0, 1)
    },
    "pcie_replay_counter_sentinel": {
        0: {
            f"{FI}(NVML_FI_DEV_PCIE_REPLAY_COUNTER)": fv(0xFFFFFFFF, 1),
            "nvmlDeviceGetPcieReplayCounter()": 3,
        },
        1: {
            f"{FI}(NVML_FI_DEV_PCIE_REPLAY_COUNTER)": fv(0xFFFFFFFF, 1),
            "nvmlDeviceGetPcieReplayCounter()": err("NotSupported"),
        },
    },
    "power_limit_zero": {0: {"nvmlDeviceGetEnforcedPowerLimit()": 0}},
    "xid_registration_not_supported_on_gpu0": {
        0: {"nvmlDeviceRegisterEvents()": err("NotSupported")},
    },
    "mig_enabled_on_gpu1": {1: {"nvmlDeviceGetMigMode()": [1, 1]}},
    "gpu1_stops_answering_during_probe": {
        1: {
            "nvmlDeviceGetPowerUsage()": err("Unknown"),
            "nvmlDeviceGetClockInfo(NVML_CLOCK_SM)": err("Unknown"),
        },
    },
}


class FakeClock:
    """A monotonic clock the test moves by hand."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def make_fake(monkeypatch: pytest.MonkeyPatch) -> Callable[..., FakeNvml]:
    """Install a fake pynvml for one scenario where soak imports pynvml."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)

    def make(scenario: str = "healthy", gpus: int = 2, **kwargs: Any) -> FakeNvml:
        fake = FakeNvml(scenario_tables(baseline_gpu, SCENARIOS[scenario], gpus), **kwargs)
        monkeypatch.setattr("soak.devices.nvml.pynvml", fake)
        return fake

    return make


@pytest.fixture
def open_nvml(clock: FakeClock, closing) -> Callable[..., NvmlBackend]:
    """Open backends on the installed fake, on the test's clock; closed at the end."""

    def open_(**kwargs: Any) -> NvmlBackend:
        kwargs.setdefault("time_fn", clock)
        kwargs.setdefault("event_wait_ms", 10)
        return closing(NvmlBackend(**kwargs))

    return open_


# -- the declared table ---------------------------------------------------------------------


def test_declared_table_covers_every_telemetry_metric() -> None:
    assert [m.name for m in METRICS] == list(TELEMETRY_METRICS)


def test_every_declared_read_names_a_real_pynvml_function_and_constants() -> None:
    for metric in (*METRICS, *nvml.INVENTORY, *nvml.SYSTEM):
        for way in metric.ways:
            for read in way.reads:
                if isinstance(read, nvml.Field):
                    assert isinstance(getattr(pynvml, read.name), int), read.key
                else:
                    assert callable(getattr(pynvml, read.func)), read.key
                    for name in (*read.args, *(v for _, v in read.kwargs)):
                        getattr(pynvml, name)


# -- healthy server -------------------------------------------------------------------------


def test_healthy_gpus_read_every_metric_in_soak_units(make_fake, open_nvml) -> None:
    make_fake("healthy")
    backend = open_nvml()
    s = by_device(backend.sample(10.0))[0]
    assert s.t_s == 10.0
    assert (s.temp_c, s.mem_temp_c) == (61, 70)
    assert (s.sm_clock_mhz, s.mem_clock_mhz) == (1980, 2619)
    assert (s.power_w, s.power_limit_w) == (650.0, 700.0)
    assert s.energy_j == 5_000_000.0
    assert (s.util_pct, s.mem_util_pct) == (100, 45)
    assert s.fan_pct is None  # SXM boards have no fan
    assert s.clock_reasons == 0
    assert (s.power_violation_s, s.thermal_violation_s) == (2.5, 0.0)
    assert (s.ecc_corrected, s.ecc_uncorrected, s.remap_pending, s.remap_failure) == (0, 0, 0, 0)
    assert s.retired_pages is None  # Hopper remaps rows instead
    assert s.pcie_replay == 0


def test_inventory_in_soak_units(make_fake, open_nvml) -> None:
    make_fake("healthy")
    info = open_nvml().devices()[1]
    assert info.index == 1 and info.backend == "nvml"
    assert info.name == "NVIDIA H100 80GB HBM3"
    assert info.uuid == "GPU-00000001-1111-2222-3333-444455556666"
    assert info.pci_bus_id == "00000000:28:00.0"
    assert (info.driver_version, info.cuda_version) == ("550.54.15", "12.4")
    assert info.memory_total_b == 85520809984
    assert (info.power_limit_w, info.default_power_limit_w) == (700.0, 700.0)
    assert (info.max_sm_clock_mhz, info.max_mem_clock_mhz) == (1980, 2619)
    assert (info.shutdown_temp_c, info.slowdown_temp_c) == (92, 89)
    assert (info.max_operating_temp_c, info.mem_max_temp_c) == (87, 95)
    assert info.torch_device == "cuda:0"
    assert info.worker_env == {"CUDA_VISIBLE_DEVICES": info.uuid, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert info.extra["compute_capability"] == "9.0"
    assert info.extra["nvml_sources"]["clock_reasons"] == "nvmlDeviceGetCurrentClocksEventReasons()"


def test_capability_table_has_every_metric_and_xid_events(make_fake, open_nvml) -> None:
    make_fake("healthy")
    caps = open_nvml().capabilities()
    assert set(caps) == {0, 1}
    assert set(caps[0]) == {*TELEMETRY_METRICS, "xid_events"}
    assert caps[0]["fan_pct"] is Capability.NOT_SUPPORTED
    assert caps[0]["retired_pages"] is Capability.NOT_SUPPORTED
    assert caps[0]["xid_events"] is Capability.SUPPORTED
    assert caps[0]["temp_c"] is Capability.SUPPORTED


def test_field_values_are_read_in_one_batched_call_per_device_and_tick(
    make_fake, open_nvml
) -> None:
    fake = make_fake("healthy")
    backend = open_nvml()
    before = fake.count("nvmlDeviceGetFieldValues")
    backend.sample(1.0)
    assert fake.count("nvmlDeviceGetFieldValues") - before == 2  # two GPUs


# -- one failure per scenario ---------------------------------------------------------------


def test_fan_not_supported_on_one_gpu_the_other_is_read(make_fake, open_nvml) -> None:
    make_fake("fan_not_supported_on_gpu1")
    backend = open_nvml()
    samples = by_device(backend.sample(1.0))
    assert samples[0].fan_pct == 35
    assert samples[1].fan_pct is None
    assert samples[1].temp_c == 62  # the rest of that GPU is read
    caps = backend.capabilities()
    assert caps[0]["fan_pct"] is Capability.SUPPORTED
    assert caps[1]["fan_pct"] is Capability.NOT_SUPPORTED


def test_hbm_temperature_field_not_supported_only_that_metric_is_none(make_fake, open_nvml) -> None:
    make_fake("hbm_temp_field_not_supported_on_gpu0")
    backend = open_nvml()
    s = by_device(backend.sample(1.0))
    assert s[0].mem_temp_c is None
    assert s[0].ecc_corrected == 0 and s[0].pcie_replay == 0  # same batched call, other entries
    assert s[1].mem_temp_c == 71
    assert backend.capabilities()[0]["mem_temp_c"] is Capability.NOT_SUPPORTED


def test_field_values_one_entry_fails_mid_run_only_that_metric_is_none(
    make_fake, open_nvml
) -> None:
    fake = make_fake("healthy")
    backend = open_nvml()
    fake.set(0, f"{FI}(NVML_FI_DEV_REMAPPED_PENDING)", err("NotSupported"))
    s = by_device(backend.sample(2.0))[0]
    assert s.remap_pending is None
    assert (s.mem_temp_c, s.remap_failure, s.ecc_uncorrected) == (70, 0, 0)


def test_hbm_temperature_sentinels_are_none_and_not_supported(make_fake, open_nvml, caplog) -> None:
    """A sensor answering 0 °C or ~9.2e18 has no reading: None, and "not supported" in the
    capability table, which never claims a metric whose every reading would be None."""
    make_fake("hbm_temp_sentinels")
    with caplog.at_level(logging.INFO, logger="soak.devices.nvml"):
        backend = open_nvml()
        for t in range(5):
            s = by_device(backend.sample(float(t)))
            assert s[0].mem_temp_c is None and s[1].mem_temp_c is None
            assert s[0].temp_c == 61
    caps = backend.capabilities()
    assert caps[0]["mem_temp_c"] is Capability.NOT_SUPPORTED
    assert caps[1]["mem_temp_c"] is Capability.NOT_SUPPORTED
    assert sum("not plausible" in r.message for r in caplog.records) == 1  # GPU 0's 0 °C, once


def test_pcie_replay_counter_sentinel_is_never_a_count(make_fake, open_nvml) -> None:
    """The field answering its sentinel is not supported: the next way is read where it
    answers (GPU 0), and the metric is None and not supported where none does (GPU 1)."""
    make_fake("pcie_replay_counter_sentinel")
    backend = open_nvml()
    s = by_device(backend.sample(1.0))
    assert (s[0].pcie_replay, s[1].pcie_replay) == (3, None)
    sources = backend.devices()[0].extra["nvml_sources"]
    assert sources["pcie_replay"] == "nvmlDeviceGetPcieReplayCounter()"
    caps = backend.capabilities()
    assert caps[0]["pcie_replay"] is Capability.SUPPORTED
    assert caps[1]["pcie_replay"] is Capability.NOT_SUPPORTED


def test_power_limit_zero_is_none(make_fake, open_nvml) -> None:
    make_fake("power_limit_zero")
    backend = open_nvml()
    assert by_device(backend.sample(1.0))[0].power_limit_w is None
    assert backend.devices()[0].power_limit_w is None


def test_combined_reason_bits_are_all_visible_and_unknown_bits_kept(make_fake, open_nvml) -> None:
    make_fake("hw_slowdown_and_hw_thermal_with_unknown_bit")
    reasons = ClockReason(by_device(open_nvml().sample(1.0))[0].clock_reasons)
    assert reasons & ClockReason.HW_SLOWDOWN
    assert reasons & ClockReason.HW_THERMAL
    assert reasons & ClockReason.SW_POWER_CAP
    assert reasons & HW_REASONS
    assert "unknown:0x1000" in reasons.names()


def test_no_permission_on_one_query(make_fake, open_nvml, caplog) -> None:
    make_fake("no_permission_for_ecc_on_gpu0")
    with caplog.at_level(logging.WARNING, logger="soak.devices.nvml"):
        backend = open_nvml()
    s = by_device(backend.sample(1.0))
    assert s[0].ecc_corrected is None and s[0].ecc_uncorrected is None
    assert s[1].ecc_corrected == 0
    caps = backend.capabilities()
    assert caps[0]["ecc_corrected"] is Capability.NO_PERMISSION
    assert caps[0]["ecc_uncorrected"] is Capability.NO_PERMISSION
    assert caps[1]["ecc_corrected"] is Capability.SUPPORTED
    assert any("no permission" in r.message for r in caplog.records)


def test_energy_counter_not_supported_is_integrated_from_power(make_fake, open_nvml) -> None:
    fake = make_fake("energy_counter_not_supported")
    backend = open_nvml()
    assert backend.capabilities()[0]["energy_j"] is Capability.FALLBACK
    assert "integrated" in backend.devices()[0].extra["nvml_sources"]["energy_j"]
    fake.set(0, "nvmlDeviceGetPowerUsage()", 100_000)
    assert by_device(backend.sample(0.0))[0].energy_j == 0.0
    fake.set(0, "nvmlDeviceGetPowerUsage()", 300_000)
    assert by_device(backend.sample(1.0))[0].energy_j == pytest.approx(200.0)
    assert by_device(backend.sample(3.0))[0].energy_j == pytest.approx(800.0)


def test_old_driver_without_newer_symbol_falls_back_and_records_missing(
    make_fake, open_nvml
) -> None:
    make_fake("old_driver_without_event_reasons_symbol")
    backend = open_nvml()
    info = backend.devices()[0]
    assert (
        info.extra["nvml_calls"]["nvmlDeviceGetCurrentClocksEventReasons()"] == "function missing"
    )
    assert info.extra["nvml_calls"]["nvmlDeviceGetCurrentClocksThrottleReasons()"] == "supported"
    assert info.extra["nvml_sources"]["clock_reasons"] == (
        "nvmlDeviceGetCurrentClocksThrottleReasons()"
    )
    assert backend.capabilities()[0]["clock_reasons"] is Capability.SUPPORTED
    assert by_device(backend.sample(1.0))[0].clock_reasons == 0


def test_old_binding_without_newer_functions_falls_back(make_fake, open_nvml, caplog) -> None:
    fake = make_fake("old_binding_without_newer_functions")
    assert not hasattr(fake, "nvmlDeviceGetTemperatureV")
    with caplog.at_level(logging.INFO, logger="soak.devices.nvml"):
        backend = open_nvml()
    calls = backend.devices()[0].extra["nvml_calls"]
    assert calls["nvmlDeviceGetTemperatureV(NVML_TEMPERATURE_GPU)"] == "function missing"
    assert calls["nvmlDeviceGetCurrentClocksEventReasons()"] == "function missing"
    s = by_device(backend.sample(1.0))[0]
    assert (s.temp_c, s.clock_reasons) == (61, 0)
    assert backend.capabilities()[0]["temp_c"] is Capability.SUPPORTED
    assert any("nvmlDeviceGetTemperatureV" in r.message for r in caplog.records)


def test_gpu_lost_mid_run_reported_once_and_left_out(make_fake, open_nvml) -> None:
    fake = make_fake("healthy", gpus=3)
    backend = open_nvml()
    assert len(backend.sample(1.0)) == 3
    fake.lose(1)
    assert sorted(by_device(backend.sample(2.0))) == [0, 2]
    events = backend.poll_events(2.0)
    assert [(e.kind, e.device, e.t_s) for e in events] == [(EventKind.DEVICE_LOST, 1, 2.0)]
    assert sorted(by_device(backend.sample(3.0))) == [0, 2]
    assert backend.poll_events(3.0) == []


def test_unknown_error_on_a_dead_gpu_is_a_lost_gpu(make_fake, open_nvml) -> None:
    fake = make_fake("healthy")
    backend = open_nvml()
    fake.set(1, "nvmlDeviceGetPowerUsage()", err("Unknown"))
    fake.set(1, "nvmlDeviceGetClockInfo(NVML_CLOCK_SM)", err("Unknown"))
    assert sorted(by_device(backend.sample(1.0))) == [0]
    assert [e.kind for e in backend.poll_events(1.0)] == [EventKind.DEVICE_LOST]


def test_unknown_error_once_on_a_live_gpu_is_one_missing_reading(make_fake, open_nvml) -> None:
    fake = make_fake("healthy")
    backend = open_nvml()
    fake.set(1, "nvmlDeviceGetPowerUsage()", err("Unknown"))
    s = by_device(backend.sample(1.0))
    assert s[1].power_w is None and s[1].sm_clock_mhz == 1980
    assert backend.poll_events(1.0) == []


def test_xid_79_from_the_event_thread_is_an_xid_and_a_lost_gpu(make_fake, open_nvml) -> None:
    fake = make_fake("healthy")
    backend = open_nvml()
    fake.push_event(1, XID, 79)
    fake.wait_handled(1)
    events = backend.poll_events(5.0)
    assert [(e.kind, e.device) for e in events] == [
        (EventKind.XID, 1),
        (EventKind.DEVICE_LOST, 1),
    ]
    assert events[0].details == {"code": 79}
    assert events[0].message.startswith("XID 79")
    assert sorted(by_device(backend.sample(6.0))) == [0]
    fake.push_event(0, XID, 13)
    fake.wait_handled(2)
    events = backend.poll_events(7.0)
    assert [(e.kind, e.device, e.details["code"]) for e in events] == [(EventKind.XID, 0, 13)]
    assert sorted(by_device(backend.sample(8.0))) == [0]  # XID 13 does not lose the GPU


def test_xid_time_is_when_it_arrived_on_the_run_clock(make_fake, open_nvml, clock) -> None:
    fake = make_fake("healthy")
    backend = open_nvml()
    fake.push_event(0, XID, 48)
    fake.wait_handled(1)  # the thread stamped it with clock.now
    clock.now += 2.5
    (event,) = backend.poll_events(50.0)
    assert event.t_s == pytest.approx(47.5)


def test_xid_registration_not_supported_is_a_capability_not_a_crash(make_fake, open_nvml) -> None:
    make_fake("xid_registration_not_supported_on_gpu0")
    caps = open_nvml().capabilities()
    assert caps[0]["xid_events"] is Capability.NOT_SUPPORTED
    assert caps[1]["xid_events"] is Capability.SUPPORTED


def test_event_set_unavailable_means_no_xid_events_anywhere(make_fake, open_nvml) -> None:
    make_fake("healthy", system={"nvmlEventSetCreate()": err("NotSupported")})
    caps = open_nvml().capabilities()
    assert caps[0]["xid_events"] is Capability.NOT_SUPPORTED
    assert caps[1]["xid_events"] is Capability.NOT_SUPPORTED


@pytest.mark.slow
def test_not_supported_is_logged_once_not_per_sample(make_fake, open_nvml, caplog) -> None:
    fake = make_fake("healthy")
    with caplog.at_level(logging.INFO, logger="soak.devices.nvml"):
        backend = open_nvml()
        fake.set(0, "nvmlDeviceGetPowerUsage()", err("NoPermission"))
        fake.set(1, "nvmlDeviceGetPowerUsage()", err("NoPermission"))
        for t in range(200):
            backend.sample(float(t))
    fan = [r for r in caplog.records if "nvmlDeviceGetFanSpeed" in r.message]
    power = [r for r in caplog.records if "nvmlDeviceGetPowerUsage" in r.message]
    assert len(fan) == 1
    assert len(power) == 1


def test_log_once_set_is_bounded(caplog) -> None:
    q = nvml.NvmlQuery()
    limit = q.log_once.MAX_LOGGED
    with caplog.at_level(logging.INFO, logger="soak.devices.nvml"):
        for i in range(limit + 50):
            q.log_once(f"f{i}", "x", f"problem {i}")
    assert len(q.log_once) == limit
    assert len(caplog.records) == limit + 1  # and one line saying logging stopped
    assert "logging no more" in caplog.records[-1].message


# -- opening ----------------------------------------------------------------------------------


def test_library_not_found_is_backend_unavailable_in_one_line(make_fake) -> None:
    make_fake("healthy", init_error="NVMLError_LibraryNotFound")
    with pytest.raises(BackendUnavailable) as exc:
        NvmlBackend()
    assert str(exc.value) == "no NVIDIA driver found (libnvidia-ml.so not loadable)"


def test_driver_not_loaded_is_backend_unavailable(make_fake) -> None:
    make_fake("healthy", init_error="NVMLError_DriverNotLoaded")
    with pytest.raises(BackendUnavailable, match="driver not loaded"):
        NvmlBackend()


def test_no_gpu_is_backend_unavailable(make_fake) -> None:
    fake = make_fake("healthy", gpus=0)
    with pytest.raises(BackendUnavailable, match="no NVIDIA GPU"):
        NvmlBackend()
    assert fake.shutdowns == 1


def test_without_a_driver_opening_fails_fast() -> None:
    """This machine has no NVIDIA driver: the real pynvml must say so in well under a second."""
    code = (
        "import time; t = time.perf_counter()\n"
        "from soak.devices.nvml import NvmlBackend\n"
        "from soak.errors import BackendUnavailable\n"
        "try:\n    NvmlBackend()\nexcept BackendUnavailable as e:\n"
        "    print(round(time.perf_counter() - t, 3), e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    if not out.stdout:
        pytest.skip(f"NVML opened here (a GPU machine): {out.stderr[-200:]}")
    seconds, message = out.stdout.strip().split(" ", 1)
    assert float(seconds) < 1.0
    assert "\n" not in message and message


def test_devices_selects_by_index_and_rejects_unknown_ones(make_fake, open_nvml) -> None:
    make_fake("healthy", gpus=4)
    backend = open_nvml(devices=[3, 1])
    assert [d.index for d in backend.devices()] == [3, 1]
    assert sorted(by_device(backend.sample(1.0))) == [1, 3]
    with pytest.raises(ConfigError, match="--devices"):
        NvmlBackend(devices=[7])
    with pytest.raises(ConfigError, match="--devices"):
        NvmlBackend(devices=[1, 1])


def test_mig_mode_is_refused_with_the_fix(make_fake) -> None:
    make_fake("mig_enabled_on_gpu1")
    with pytest.raises(BackendUnavailable, match="MIG"):
        NvmlBackend()


def test_gpu_lost_at_start_is_listed_and_reported_lost(make_fake, open_nvml) -> None:
    make_fake("healthy", gpus=3, lost_at_start=[1])
    backend = open_nvml()
    assert [d.index for d in backend.devices()] == [0, 1, 2]
    assert backend.devices()[1].torch_device is None
    assert sorted(by_device(backend.sample(1.0))) == [0, 2]
    assert [(e.kind, e.device) for e in backend.poll_events(1.0)] == [(EventKind.DEVICE_LOST, 1)]


def test_gpu_lost_during_the_probe_is_listed_and_reported_lost_the_others_go_on(
    make_fake, open_nvml
) -> None:
    make_fake("gpu1_stops_answering_during_probe", gpus=3)
    backend = open_nvml()
    assert [d.index for d in backend.devices()] == [0, 1, 2]
    assert backend.devices()[1].torch_device is None
    assert backend.capabilities()[1] == {}
    assert backend.capabilities()[2]["xid_events"] is Capability.SUPPORTED
    assert sorted(by_device(backend.sample(1.0))) == [0, 2]
    assert [(e.kind, e.device, e.t_s) for e in backend.poll_events(1.0)] == [
        (EventKind.DEVICE_LOST, 1, 0.0)
    ]


def test_close_stops_the_event_thread_and_shuts_nvml_down_once(make_fake, clock) -> None:
    fake = make_fake("healthy")
    backend = NvmlBackend(time_fn=clock, event_wait_ms=10)
    threads = [t for t in __import__("threading").enumerate() if t.name == "soak-nvml-events"]
    assert threads
    backend.close()
    backend.close()
    assert not any(t.is_alive() for t in threads)
    assert fake.shutdowns == 1


# -- CUDA_VISIBLE_DEVICES -----------------------------------------------------------------------


def test_cuda_visible_devices_uuids_and_prefixes_in_their_order(
    make_fake, open_nvml, monkeypatch
) -> None:
    make_fake("healthy", gpus=4)
    monkeypatch.setenv(
        "CUDA_VISIBLE_DEVICES", "GPU-00000003-1111-2222-3333-444455556666,GPU-00000001"
    )
    devices = open_nvml().devices()
    assert [(d.index, d.extra["nvml_index"]) for d in devices] == [(0, 3), (1, 1)]


def test_cuda_visible_devices_indices_count_in_pci_bus_order(
    make_fake, open_nvml, monkeypatch
) -> None:
    fake = make_fake("healthy", gpus=3)
    fake.set(0, "nvmlDeviceGetPciInfo()", {"busId": "00000000:C1:00.0"})  # NVML 0 is last on PCI
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,2")
    devices = open_nvml().devices()
    assert [d.extra["nvml_index"] for d in devices] == [1, 0]


def test_cuda_visible_devices_ends_at_the_first_invalid_entry(
    make_fake, open_nvml, monkeypatch
) -> None:
    make_fake("healthy", gpus=3)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,7,2")
    assert [d.extra["nvml_index"] for d in open_nvml().devices()] == [1]


@pytest.mark.parametrize("cvd", ["MIG-5c5a5f0e-1111-2222-3333-444455556666", "", "-1"])
def test_cuda_visible_devices_with_mig_or_nothing_is_unavailable(
    make_fake, monkeypatch, cvd
) -> None:
    make_fake("healthy")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", cvd)
    with pytest.raises(BackendUnavailable, match="MIG" if cvd.startswith("MIG") else "no NVIDIA"):
        NvmlBackend()


# -- raw probe dump -----------------------------------------------------------------------------


def test_probe_raw_dump_replays_into_the_same_readings(make_fake, monkeypatch, clock) -> None:
    make_fake("fan_not_supported_on_gpu1")
    dump = probe_raw()
    assert dump["format"] == nvml.RAW_FORMAT
    gpu1: Mapping[str, Any] = dump["devices"][1]
    assert gpu1["nvmlDeviceGetFanSpeed()"] == {"error": "NVMLError_NotSupported"}
    assert gpu1[f"{FI}(NVML_FI_DEV_MEMORY_TEMP)"] == {"type": 1, "value": 71}
    assert gpu1["nvmlDeviceGetUtilizationRates()"] == {"gpu": 100, "memory": 45}
    original = NvmlBackend(time_fn=clock, watch_events=False)
    expected = original.sample(1.0)
    original.close()
    monkeypatch.setattr("soak.devices.nvml.pynvml", FakeNvml.from_dump(dump))
    replayed = NvmlBackend(time_fn=clock, watch_events=False)
    try:
        assert replayed.sample(1.0) == expected
    finally:
        replayed.close()


# -- on a real NVIDIA GPU (skipped without one) -------------------------------------------------


@pytest.fixture
def real_nvml(monkeypatch: pytest.MonkeyPatch) -> Iterator[NvmlBackend]:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    try:
        backend = NvmlBackend(event_wait_ms=100)
    except BackendUnavailable as exc:
        pytest.skip(f"no NVIDIA GPU here: {exc}")
    yield backend
    backend.close()


@pytest.mark.gpu
def test_real_gpu_inventory_capabilities_and_readings(real_nvml: NvmlBackend) -> None:
    info = real_nvml.devices()[0]
    assert info.uuid and info.uuid.startswith("GPU-")
    assert info.cuda_version and info.cuda_version.count(".") == 1
    assert info.memory_total_b and info.memory_total_b > 2**30
    caps = real_nvml.capabilities()[info.index]
    assert set(caps) == {*TELEMETRY_METRICS, "xid_events"}
    for metric in ("temp_c", "sm_clock_mhz", "power_w", "power_limit_w", "clock_reasons"):
        assert caps[metric] is Capability.SUPPORTED, metric
    first = by_device(real_nvml.sample(0.0))[info.index]
    time.sleep(1.0)
    second = by_device(real_nvml.sample(1.0))[info.index]
    assert first.temp_c is not None and 0 < first.temp_c < 120
    assert first.power_w is not None and 0 < first.power_w < 2000
    assert first.energy_j is not None and second.energy_j is not None
    assert second.energy_j >= first.energy_j


@pytest.mark.gpu
def test_real_gpu_worker_env_makes_cuda0_that_gpu(real_nvml: NvmlBackend) -> None:
    pytest.importorskip("torch")
    info = real_nvml.devices()[-1]
    code = (
        "import torch; p = torch.cuda.get_device_properties(0)\n"
        "print(torch.cuda.device_count(), 'GPU-' + str(p.uuid))\n"
    )
    env = {**__import__("os").environ, **info.worker_env}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    count, uuid = out.stdout.split()
    assert (count, uuid.lower()) == ("1", info.uuid.lower())


@pytest.mark.gpu
def test_real_gpu_selected_by_uuid_prefix(real_nvml: NvmlBackend, monkeypatch) -> None:
    uuid = real_nvml.devices()[-1].uuid
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", uuid[:12])
    other = NvmlBackend(watch_events=False)
    try:
        assert [d.uuid for d in other.devices()] == [uuid]
    finally:
        other.close()


# -- replay of a real H200 (tests/devices/fixtures/nvml_h200.json, written by probe_raw) --------


def test_replayed_h200_probe_reads_like_the_real_one(monkeypatch, clock) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    fake = FakeNvml.from_fixture("nvml_h200.json", strict=True)
    # recorded before soak read the process list: an idle GPU lists no compute process
    fake.set(0, "nvmlDeviceGetComputeRunningProcesses()", [])
    monkeypatch.setattr("soak.devices.nvml.pynvml", fake)
    backend = NvmlBackend(time_fn=clock, event_wait_ms=10)
    try:
        info = backend.devices()[0]
        assert (info.name, info.cuda_version, info.driver_version) == (
            "NVIDIA H200",
            "13.0",
            "580.159.04",
        )
        assert info.memory_total_b == 150754820096
        assert (info.slowdown_temp_c, info.shutdown_temp_c, info.mem_max_temp_c) == (89, 95, 95)
        caps = backend.capabilities()[0]
        unreadable = {m for m, c in caps.items() if c is not Capability.SUPPORTED}
        assert unreadable == {"fan_pct", "retired_pages", "foreign_load_pct"}
        s = backend.sample(0.0)[0]
        assert (s.temp_c, s.mem_temp_c, s.sm_clock_mhz, s.mem_clock_mhz) == (33, 35, 390, 3201)
        assert s.power_w == pytest.approx(88.661)
        assert s.energy_j == pytest.approx(2439.280)
        assert ClockReason(s.clock_reasons) == ClockReason.GPU_IDLE
        assert (s.ecc_uncorrected, s.remap_pending, s.pcie_replay) == (0, 0, 1)
    finally:
        backend.close()


@given(st.one_of(st.integers(-(2**70), 2**70), st.floats(allow_nan=True, allow_infinity=True)))
def test_clean_never_passes_a_sentinel_or_impossible_number(value: float) -> None:
    out = nvml._clean(value)
    if out is not None:
        assert out == value
        assert out not in (0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF)
        assert math.isfinite(out) and 0 <= out < 2**63 - 1


# -- what else runs on the devices ----------------------------------------------------------


def test_a_compute_process_not_soaks_is_counted_and_named_once(make_fake, open_nvml) -> None:
    own = {"pid": os.getpid(), "usedGpuMemory": 2 * 2**30}
    other = {"pid": 4242, "usedGpuMemory": 8 * 2**30}
    fake = make_fake(
        "healthy",
        system={"nvmlSystemGetProcessName(4242)": b"python3"},
    )
    procs = "nvmlDeviceGetComputeRunningProcesses()"
    fake.set(0, procs, [other])  # soak's worker has no context yet: whose pids are these?
    backend = open_nvml()
    assert backend.capabilities()[0]["foreign_procs"] is Capability.SUPPORTED
    assert backend.capabilities()[0]["foreign_load_pct"] is Capability.NOT_SUPPORTED
    first = by_device(backend.sample(1.0))[0]
    assert (first.foreign_procs, first.foreign_mem_mib) == (None, None)  # not yet known
    fake.set(1, procs, [own])  # the driver lists soak's own worker: its pids are ours
    fake.set(0, procs, [own, other])
    for t in (2.0, 3.0):
        by_id = by_device(backend.sample(t))
        assert (by_id[0].foreign_procs, by_id[0].foreign_mem_mib) == (1, 8192.0)
        assert (by_id[1].foreign_procs, by_id[1].foreign_mem_mib) == (0, 0.0)
    seen = [e for e in backend.poll_events(3.0) if e.kind is EventKind.FOREIGN_PROCESS]
    assert len(seen) == 1 and seen[0].device == 0 and seen[0].t_s == 2.0
    assert seen[0].message == "another process on the device: pid 4242 (python3), 8192 MiB"
    assert seen[0].details == {"pid": 4242, "name": "python3", "used_mib": 8192.0}
