"""AmdBackend against a fake amdsmi built from per-GPU scenario tables.

Each scenario is named after the failure it reproduces; the fake answers everything else like
a healthy MI300X (`fake_amdsmi.baseline_gpu`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from soak.devices import amd
from soak.devices.amd import METRICS, AmdBackend
from soak.errors import BackendUnavailable, ConfigError
from soak.model import TELEMETRY_METRICS, Capability, ClockReason, EventKind
from tests.devices.conftest import by_device, scenario_tables
from tests.devices.fake_amdsmi import NA, FakeAmdSmi, baseline_gpu, err

TEMP = "amdsmi_get_temp_metric"
HOT = f"{TEMP}(AmdSmiTemperatureType.HOTSPOT, AmdSmiTemperatureMetric.CURRENT)"
VRAM = f"{TEMP}(AmdSmiTemperatureType.VRAM, AmdSmiTemperatureMetric.CURRENT)"
METRICS_INFO = "amdsmi_get_gpu_metrics_info()"
VIOLATION = "amdsmi_get_violation_status()"


def _older_binding(gpu: dict[str, Any]) -> dict[str, Any]:
    """amdsmi 6.0/6.1: other key names, temperatures in m°C, no enumeration info."""
    power = {k: v for k, v in gpu["amdsmi_get_power_info()"].items() if k != "socket_power"}
    sys_clock = gpu["amdsmi_get_clock_info(AmdSmiClkType.SYS)"]
    return {
        "amdsmi_get_power_info()": power,
        "amdsmi_get_clock_info(AmdSmiClkType.SYS)": {
            "cur_clk": 2100,
            "max_clk": sys_clock["max_clk"],
        },
        "amdsmi_get_energy_count()": {"power": 1_000_000_000, "counter_resolution": 15.259},
        HOT: 75_000,
        "amdsmi_get_gpu_bad_page_info()": "No bad pages found.",
    }


# scenario name → {gpu: {read: answer}}
SCENARIOS: dict[str, dict[int, dict[str, Any]]] = {
    "healthy": {},
    "fan_present_on_gpu1_only": {1: {"amdsmi_get_gpu_fan_speed(0)": 128}},
    "older_binding_key_names_and_millidegrees": {0: _older_binding(baseline_gpu(0))},
    "hbm_temperature_all_ones_and_na": {
        0: {VRAM: 0xFFFF, METRICS_INFO: {**baseline_gpu(0)[METRICS_INFO], "temperature_mem": NA}},
    },
    "mi250_throttle_bits_without_violation_api": {
        0: {
            VIOLATION: err("NOT_SUPPORTED"),
            METRICS_INFO: {
                **baseline_gpu(0)[METRICS_INFO],
                "indep_throttle_status": (1 << 0) | (1 << 36) | (1 << 47) | (1 << 57),
            },
        },
    },
    "no_permission_for_ecc_on_gpu0": {0: {"amdsmi_get_gpu_total_ecc_count()": err("NO_PERM")}},
    "energy_counter_not_supported": {
        gpu: {"amdsmi_get_energy_count()": err("NOT_SUPPORTED")} for gpu in (0, 1)
    },
    "hotspot_sensor_file_missing_on_gpu1": {1: {HOT: err("FILE_ERROR")}},
    "bad_pages_pending_and_unreservable": {
        0: {
            "amdsmi_get_gpu_bad_page_info()": [
                {"value": 0, "page_address": 0x1000, "page_size": 4096, "status": 0},
                {"value": 1, "page_address": 0x2000, "page_size": 4096, "status": 0},
                {"value": 2, "page_address": 0x3000, "page_size": 4096, "status": 1},
                {"value": 3, "page_address": 0x4000, "page_size": 4096, "status": 2},
            ],
        },
    },
}


@pytest.fixture
def make_fake(monkeypatch: pytest.MonkeyPatch) -> Callable[..., FakeAmdSmi]:
    """Install a fake amdsmi for one scenario where soak imports amdsmi."""
    monkeypatch.delenv("ROCR_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("HIP_VISIBLE_DEVICES", raising=False)

    def make(scenario: str = "healthy", gpus: int = 2, **kwargs: Any) -> FakeAmdSmi:
        fake = FakeAmdSmi(scenario_tables(baseline_gpu, SCENARIOS[scenario], gpus), **kwargs)
        monkeypatch.setattr("soak.devices.amd.amdsmi", fake)
        return fake

    return make


@pytest.fixture
def open_amd(closing) -> Callable[..., AmdBackend]:
    return lambda **kwargs: closing(AmdBackend(**kwargs))


def test_declared_table_covers_every_telemetry_metric() -> None:
    assert [m.name for m in METRICS] == list(TELEMETRY_METRICS)


def test_without_amdsmi_the_backend_is_unavailable_with_the_fix(monkeypatch) -> None:
    monkeypatch.setattr("soak.devices.amd.amdsmi", None)
    monkeypatch.setattr(
        "soak.devices.amd._IMPORT_PROBLEM", "amdsmi not installed (pip install soak[amd])"
    )
    with pytest.raises(BackendUnavailable) as exc:
        AmdBackend()
    assert str(exc.value) == "amdsmi not installed (pip install soak[amd])"


def test_on_this_machine_amd_is_unavailable_not_a_crash() -> None:
    if amd.amdsmi is not None:
        pytest.skip("amdsmi is installed here")
    with pytest.raises(BackendUnavailable, match="amdsmi"):
        AmdBackend()


def test_driver_not_loaded_is_backend_unavailable(make_fake) -> None:
    make_fake(init_error="AMDSMI_STATUS_INIT_ERROR")
    with pytest.raises(BackendUnavailable, match="amdsmi could not start") as exc:
        AmdBackend()
    assert "\n" not in str(exc.value)


def test_no_gpu_is_backend_unavailable(make_fake) -> None:
    fake = make_fake(gpus=0)
    with pytest.raises(BackendUnavailable, match="no AMD GPU"):
        AmdBackend()
    assert fake.shutdowns == 1


def test_healthy_mi300x_reads_every_metric_in_soak_units(make_fake, open_amd) -> None:
    make_fake()
    backend = open_amd()
    s = by_device(backend.sample(0.0))[0]
    assert (s.temp_c, s.mem_temp_c) == (75, 66)
    assert (s.sm_clock_mhz, s.mem_clock_mhz) == (2100, 1300)
    assert (s.power_w, s.power_limit_w) == (700, 750.0)
    assert s.energy_j == pytest.approx(1_000_000_000 * 15.259 / 1e6)
    assert (s.util_pct, s.mem_util_pct) == (100, 38)
    assert s.fan_pct is None
    assert s.clock_reasons == 0
    assert (s.power_violation_s, s.thermal_violation_s) == (0.0, 0.0)
    assert (s.ecc_corrected, s.ecc_uncorrected) == (0, 0)
    assert (s.remap_pending, s.remap_failure, s.retired_pages, s.pcie_replay) == (0, 0, 0, 0)


def test_inventory_and_worker_env(make_fake, open_amd) -> None:
    make_fake()
    info = open_amd().devices()[1]
    assert (info.index, info.backend, info.name) == (1, "amd", "AMD Instinct MI300X")
    assert info.pci_bus_id == "0000:1c:00.0"
    assert info.memory_total_b == 196592 * 2**20
    assert (info.power_limit_w, info.default_power_limit_w) == (750.0, 750.0)
    assert (info.max_sm_clock_mhz, info.max_mem_clock_mhz) == (2100, 1300)
    assert (info.slowdown_temp_c, info.shutdown_temp_c, info.mem_max_temp_c) == (100, 110, 105)
    assert info.driver_version == "6.8.5"
    assert info.torch_device == "cuda:0"
    assert info.worker_env == {
        "ROCR_VISIBLE_DEVICES": "GPU-5d2f4a1c00000001",
        "HIP_VISIBLE_DEVICES": "0",
        "CUDA_VISIBLE_DEVICES": "0",
    }
    assert info.extra["hip_uuid"] == "GPU-5d2f4a1c00000001"


def test_without_enumeration_info_worker_env_uses_the_index(make_fake, open_amd) -> None:
    make_fake(hidden={"amdsmi_get_gpu_enumeration_info"})
    info = open_amd().devices()[1]
    assert info.worker_env == {"HIP_VISIBLE_DEVICES": "1", "CUDA_VISIBLE_DEVICES": "1"}


def test_capability_table(make_fake, open_amd) -> None:
    make_fake()
    caps = open_amd().capabilities()
    assert set(caps[0]) == {*TELEMETRY_METRICS, "xid_events"}
    assert caps[0]["fan_pct"] is Capability.NOT_SUPPORTED
    assert caps[0]["power_violation_s"] is Capability.FALLBACK  # derived from PVIOL counters
    assert caps[0]["xid_events"] is Capability.NOT_SUPPORTED
    assert caps[0]["temp_c"] is Capability.SUPPORTED


def test_fan_present_on_one_gpu_only(make_fake, open_amd) -> None:
    make_fake("fan_present_on_gpu1_only")
    backend = open_amd()
    s = by_device(backend.sample(0.0))
    assert s[0].fan_pct is None
    assert s[1].fan_pct == pytest.approx(128 * 100 / 255)
    assert backend.capabilities()[1]["fan_pct"] is Capability.SUPPORTED


def test_older_binding_key_names_and_millidegrees(make_fake, open_amd) -> None:
    make_fake("older_binding_key_names_and_millidegrees")
    s = by_device(open_amd().sample(0.0))[0]
    assert s.temp_c == 75.0
    assert s.power_w == 700
    assert s.sm_clock_mhz == 2100
    assert s.energy_j == pytest.approx(15259.0)
    assert s.retired_pages == 0


def test_hbm_temperature_all_ones_and_na_is_none(make_fake, open_amd) -> None:
    make_fake("hbm_temperature_all_ones_and_na")
    backend = open_amd()
    s = by_device(backend.sample(0.0))
    assert s[0].mem_temp_c is None
    assert s[1].mem_temp_c == 67
    assert backend.capabilities()[0]["mem_temp_c"] is Capability.NOT_SUPPORTED


def test_mi250_throttle_bits_map_where_honest_and_unmapped_bits_are_an_event(
    make_fake, open_amd
) -> None:
    make_fake("mi250_throttle_bits_without_violation_api")
    backend = open_amd()
    reasons = ClockReason(by_device(backend.sample(1.0))[0].clock_reasons)
    assert reasons == ClockReason.SW_POWER_CAP | ClockReason.SW_THERMAL | ClockReason.HW_SLOWDOWN
    events = backend.poll_events(1.0)
    assert [(e.kind, e.device) for e in events] == [(EventKind.WARNING, 0)]
    assert events[0].details == {"indep_throttle_status_unmapped": 1 << 57}
    backend.sample(2.0)
    assert backend.poll_events(2.0) == []  # reported once
    caps = backend.capabilities()[0]
    assert caps["power_violation_s"] is Capability.NOT_SUPPORTED
    assert backend.devices()[0].extra["amd_sources"]["clock_reasons"] == METRICS_INFO


def test_violation_counters_become_seconds_in_violation(make_fake, open_amd) -> None:
    fake = make_fake()
    backend = open_amd()
    assert by_device(backend.sample(0.0))[0].power_violation_s == 0.0
    status = dict(baseline_gpu(0)[VIOLATION])
    status.update(acc_counter=2000, acc_ppt_pwr=500, active_ppt_pwr=True)
    fake.set(0, VIOLATION, status)
    s = by_device(backend.sample(2.0))[0]
    assert s.power_violation_s == pytest.approx(1.0)  # half of the 2 s between ticks
    assert s.thermal_violation_s == 0.0
    assert ClockReason(s.clock_reasons) == ClockReason.SW_POWER_CAP


def test_no_permission_on_one_query(make_fake, open_amd) -> None:
    make_fake("no_permission_for_ecc_on_gpu0")
    backend = open_amd()
    s = by_device(backend.sample(0.0))
    assert s[0].ecc_corrected is None and s[1].ecc_corrected == 0
    assert backend.capabilities()[0]["ecc_uncorrected"] is Capability.NO_PERMISSION


def test_energy_counter_not_supported_is_integrated_from_power(make_fake, open_amd) -> None:
    fake = make_fake("energy_counter_not_supported")
    backend = open_amd()
    assert backend.capabilities()[0]["energy_j"] is Capability.FALLBACK
    assert "integrated" in backend.devices()[0].extra["amd_sources"]["energy_j"]
    assert by_device(backend.sample(0.0))[0].energy_j == 0.0
    fake.set(0, "amdsmi_get_power_info()", {"socket_power": 500})
    assert by_device(backend.sample(2.0))[0].energy_j == pytest.approx(1200.0)


def test_stalled_energy_counter_falls_back_to_integrated_power(make_fake, open_amd) -> None:
    make_fake(gpus=1)  # the counter never moves while 700 W are drawn
    backend = open_amd()
    start = by_device(backend.sample(0.0))[0].energy_j
    for t in range(1, 30):
        assert by_device(backend.sample(float(t)))[0].energy_j == start
    assert backend.poll_events(29.0) == []
    after = by_device(backend.sample(30.0))[0].energy_j
    assert after == pytest.approx(start + 700 * 30)
    assert by_device(backend.sample(31.0))[0].energy_j == pytest.approx(start + 700 * 31)
    (event,) = backend.poll_events(31.0)
    assert (event.kind, event.device, event.t_s) == (EventKind.WARNING, 0, 30.0)
    assert backend.capabilities()[0]["energy_j"] is Capability.FALLBACK


def test_energy_counter_that_agrees_with_power_is_kept(make_fake, open_amd) -> None:
    fake = make_fake(gpus=1)
    backend = open_amd()
    count = 1_000_000_000
    for t in range(0, 61):
        fake.set(
            0,
            "amdsmi_get_energy_count()",
            {
                "energy_accumulator": count + int(t * 700 / 15.259e-6),
                "counter_resolution": 15.259,
            },
        )
        backend.sample(float(t))
    assert backend.capabilities()[0]["energy_j"] is Capability.SUPPORTED
    sources = backend.devices()[0].extra["amd_sources"]
    assert sources["energy_j"] == "amdsmi_get_energy_count()"
    assert backend.poll_events(60.0) == []


def test_sensor_file_missing_at_start_is_not_supported_not_lost(make_fake, open_amd) -> None:
    make_fake("hotspot_sensor_file_missing_on_gpu1")
    backend = open_amd()
    assert backend.devices()[1].extra["amd_sources"]["temp_c"] == METRICS_INFO
    assert by_device(backend.sample(0.0))[1].temp_c == 76
    assert backend.poll_events(0.0) == []


def test_gpu_lost_mid_run_reported_once_and_left_out(make_fake, open_amd) -> None:
    fake = make_fake(gpus=3)
    backend = open_amd()
    assert len(backend.sample(0.0)) == 3
    fake.lose(2)
    assert sorted(by_device(backend.sample(1.0))) == [0, 1]
    assert [(e.kind, e.device, e.t_s) for e in backend.poll_events(1.0)] == [
        (EventKind.DEVICE_LOST, 2, 1.0)
    ]
    assert sorted(by_device(backend.sample(2.0))) == [0, 1]
    assert backend.poll_events(2.0) == []


def test_one_io_error_on_a_live_gpu_is_one_missing_reading(make_fake, open_amd) -> None:
    fake = make_fake()
    backend = open_amd()
    fake.set(0, HOT, err("IO"))
    s = by_device(backend.sample(1.0))[0]
    assert s.temp_c is None and s.power_w == 700
    assert backend.poll_events(1.0) == []


def test_bad_pages_become_retired_pending_and_failed(make_fake, open_amd) -> None:
    make_fake("bad_pages_pending_and_unreservable")
    s = by_device(open_amd().sample(0.0))[0]
    assert (s.retired_pages, s.remap_pending, s.remap_failure) == (2, 1, 1)


def test_not_supported_is_logged_once_not_per_sample(make_fake, open_amd, caplog) -> None:
    fake = make_fake()
    with caplog.at_level(logging.INFO, logger="soak.devices.amd"):
        backend = open_amd()
        fake.set(0, "amdsmi_get_gpu_activity()", err("BUSY"))
        for t in range(100):
            backend.sample(float(t))
    fan = [r for r in caplog.records if "amdsmi_get_gpu_fan_speed" in r.message]
    busy = [r for r in caplog.records if "amdsmi_get_gpu_activity" in r.message]
    assert len(fan) == 1 and len(busy) == 1


def test_devices_selects_and_rejects(make_fake, open_amd) -> None:
    make_fake(gpus=4)
    assert [d.index for d in open_amd(devices=[2]).devices()] == [2]
    with pytest.raises(ConfigError, match="--devices"):
        AmdBackend(devices=[9])
    with pytest.raises(ConfigError, match="--devices"):
        AmdBackend(devices=[1, 1])


def test_close_shuts_amdsmi_down_once(make_fake) -> None:
    fake = make_fake()
    backend = AmdBackend()
    backend.close()
    backend.close()
    assert fake.shutdowns == 1


@pytest.mark.slow
@given(
    watts=st.lists(st.floats(min_value=50, max_value=1000), min_size=40, max_size=120),
    drift=st.floats(min_value=0.9, max_value=1.1),
)
def test_energy_guard_keeps_a_counter_within_tolerance(watts: list[float], drift: float) -> None:
    """A counter within 10 % of integrated power is never replaced, and never goes backwards."""
    guard = amd._EnergyGuard()
    counter, last = 5_000.0, None
    previous_p = None
    for t, p in enumerate(watts):
        if previous_p is not None:
            counter += drift * (p + previous_p) / 2
        previous_p = p
        value = guard.add(float(t), counter, p)
        assert value == counter
        assert last is None or value >= last
        last = value
    assert guard.counter_ok


@pytest.mark.slow
@given(st.lists(st.tuples(st.integers(1, 10_000), st.floats(0, 1)), min_size=1, max_size=50))
def test_violation_time_never_exceeds_elapsed_time(steps: list[tuple[int, float]]) -> None:
    clock = amd._ViolationTime()
    total = hits = 0
    for t, (samples, share) in enumerate(steps):
        total += samples
        hits += int(samples * share)
        seconds = clock.add(float(t), (total, hits))
        assert seconds is not None and 0.0 <= seconds <= t + 1e-9


def test_violation_flags_with_one_unreadable_are_not_a_clean_bill() -> None:
    """PROCHOT reading N/A must not count as "no HW slowdown"."""
    flags = {name: False for name in amd._VIOLATION_BITS}
    assert amd._violation_reasons(flags) == (0, 0)
    flags["active_prochot_thrm"] = "N/A"
    assert amd._violation_reasons(flags) is None
    flags["active_ppt_pwr"] = True  # a readable flag that is set does not make up for it
    assert amd._violation_reasons(flags) is None


def test_a_bad_page_with_an_unreadable_status_counts_as_the_worst_case() -> None:
    pending = amd._pages("PENDING", flag=True)
    retired = amd._pages("RESERVED")
    assert pending([]) == 0 and retired([]) == 0
    mystery = [{"page_address": 0x1000, "status": "N/A"}]
    assert pending(mystery) == 1 and retired(mystery) == 1


def test_a_compute_process_not_soaks_is_counted_and_named_once(make_fake, open_amd) -> None:
    fake = make_fake("healthy")
    own = {"name": "python", "pid": os.getpid(), "memory_usage": {"vram_mem": 2 * 2**30}}
    other = {"name": "hipcc-job", "pid": 4343, "mem": 4 * 2**30, "memory_usage": "N/A"}
    fake.tables[0]["amdsmi_get_gpu_process_list()"] = [own, other]
    backend = open_amd()
    assert backend.capabilities()[0]["foreign_load_pct"] is Capability.NOT_SUPPORTED
    s = by_device(backend.sample(5.0))
    assert (s[0].foreign_procs, s[0].foreign_mem_mib) == (1, 4096.0)
    assert (s[1].foreign_procs, s[1].foreign_mem_mib) == (0, 0.0)
    (seen,) = [e for e in backend.poll_events(5.0) if e.kind is EventKind.FOREIGN_PROCESS]
    assert seen.message == "another process on the device: pid 4343 (hipcc-job), 4096 MiB"
    assert seen.device == 0 and seen.details["pid"] == 4343
