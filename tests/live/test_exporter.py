"""The Prometheus exporter, fed hand-made snapshots and scraped over HTTP."""

from __future__ import annotations

import dataclasses
import socket
import threading
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from soak.errors import ConfigError
from soak.live.exporter import MetricsExporter
from soak.model import ClockReason, Telemetry
from soak.progress import Rate

from .snapshots import device, snapshot, xid


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples, name: str, **labels: str) -> float | None:
    for (n, have), v in samples.items():
        if n == name and all(dict(have).get(k) == w for k, w in labels.items()):
            return v
    return None


@pytest.fixture(scope="module")
def closing():
    """The exporters' closes, joined at the module's end: a close waits up to half a second
    for the HTTP server's poll (prometheus_client serves with the default 0.5 s), which the
    next test need not wait for."""
    closes: list[threading.Thread] = []
    yield closes
    for close in closes:
        close.join()


@pytest.fixture
def exporter(closing):
    exp = MetricsExporter(0)
    yield exp
    close = threading.Thread(target=exp.close)
    close.start()
    closing.append(close)


def test_device_gauges_in_base_units_and_unreadable_values_absent(exporter) -> None:
    exporter.update(snapshot(100.0))
    s = scrape(exporter.url)
    assert value(s, "soak_device_temperature_celsius", device="0", host="node1") == 61.0
    assert value(s, "soak_device_temperature_celsius", device="1") is None  # not readable
    assert value(s, "soak_device_sm_clock_hertz", device="0") == 1.98e9
    assert value(s, "soak_device_power_limit_watts", device="1") == 700.0
    assert value(s, "soak_device_power_watts", device="0") is None  # None, never 0
    assert value(s, "soak_device_ecc_uncorrected_errors_total", device="0") is None
    assert value(s, "soak_device_ecc_corrected_errors_total", device="0") == 3
    assert value(s, "soak_device_work_units_per_second", part="gemm", unit="FLOP") == 6.5e14
    assert value(s, "soak_run_planned_seconds") == 3600.0
    assert value(s, "soak_run_phase", phase="load") == 1.0
    assert value(s, "soak_run_phase", phase="baseline") == 0.0
    labels = dict(next(k[1] for k in s if k[0] == "soak_device_temperature_celsius"))
    assert labels == {
        "host": "node1",
        "device": "0",
        "uuid": "GPU-0000",
        "sku": "NVIDIA H100 80GB HBM3",
        "workload": "mix",
    }


def test_the_inlet_gauge_is_the_bmcs_reading_and_absent_without_one(exporter) -> None:
    exporter.update(snapshot(100.0, inlet_c=24.5))
    s = scrape(exporter.url)
    assert value(s, "soak_inlet_temperature_celsius", host="node1") == 24.5
    exporter.update(snapshot(101.0))  # no BMC inlet, or its read failed: absent, never 0
    s = scrape(exporter.url)
    assert value(s, "soak_run_elapsed_seconds") == 101.0
    assert not [k for k in s if k[0].startswith("soak_inlet")]


def test_clock_event_time_and_xids_are_counted_and_protection_marks_the_device(exporter) -> None:
    brake = int(ClockReason.SW_POWER_CAP | ClockReason.HW_POWER_BRAKE)
    exporter.update(snapshot(100.0, (device(0, 100.0),)))
    for t in (101.0, 102.0, 103.0):
        exporter.update(snapshot(t, (device(0, t, reasons=brake),)))
    exporter.update(snapshot(104.0, (device(0, 104.0, reads_xids=True),), events=[xid(104.0, 0)]))
    s = scrape(exporter.url)
    assert value(s, "soak_device_clock_event_seconds_total", reason="hw_power_brake") == 3.0
    assert value(s, "soak_device_clock_event_seconds_total", reason="sw_power_cap") == 4.0
    assert value(s, "soak_device_clock_event_active", reason="hw_power_brake") == 0.0
    assert value(s, "soak_device_clock_event_active", reason="sw_power_cap") == 1.0
    assert value(s, "soak_device_xid_events_total", device="0") == 1.0
    assert value(s, "soak_device_failing", device="0") == 1.0


def test_equilibrium_state_and_eta(exporter) -> None:
    exporter.update(
        snapshot(
            900.0,
            (device(0, 900.0, equilibrium_s=640.0, eta_s=0.0), device(1, 900.0, eta_s=120.0)),
        )
    )
    s = scrape(exporter.url)
    assert value(s, "soak_device_equilibrium", device="0") == 1.0
    assert value(s, "soak_device_equilibrium_time_seconds", device="0") == 640.0
    assert value(s, "soak_device_equilibrium", device="1") == 0.0
    assert value(s, "soak_device_equilibrium_eta_seconds", device="1") == 120.0
    assert value(s, "soak_device_failing", device="1") == 0.0
    assert value(s, "soak_run_devices_at_equilibrium") == 1.0


def test_verdict_eta_per_device_and_for_the_server_the_latest(exporter) -> None:
    devices = (device(0, 600.0, verdict_eta_s=240.0), device(1, 600.0, verdict_eta_s=780.0))
    exporter.update(dataclasses.replace(snapshot(600.0, devices), until_steady=True))
    s = scrape(exporter.url)
    assert value(s, "soak_device_verdict_eta_seconds", device="0") == 240.0
    assert value(s, "soak_device_verdict_eta_seconds", device="1") == 780.0
    assert value(s, "soak_run_verdict_eta_seconds") == 780.0


def test_no_verdict_eta_while_a_device_has_no_prediction(exporter) -> None:
    devices = (device(0, 60.0, verdict_eta_s=240.0), device(1, 60.0))
    exporter.update(dataclasses.replace(snapshot(60.0, devices), until_steady=True))
    s = scrape(exporter.url)
    assert value(s, "soak_device_verdict_eta_seconds", device="0") == 240.0
    assert value(s, "soak_device_verdict_eta_seconds", device="1") is None  # absent, never 0
    assert value(s, "soak_run_verdict_eta_seconds") is None


def test_a_port_in_use_is_a_one_line_configuration_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError) as err:
            MetricsExporter(port)
    assert str(err.value).startswith(f"--metrics-port {port}: cannot listen on 127.0.0.1:{port} (")
    assert "\n" not in str(err.value)


def test_nothing_is_served_before_the_first_tick(exporter) -> None:
    assert scrape(exporter.url) == {}


def test_a_device_that_cannot_report_xids_has_no_xid_count_not_zero(exporter) -> None:
    exporter.update(snapshot(100.0, (device(0, 100.0, reads_xids=True), device(1, 100.0))))
    s = scrape(exporter.url)
    assert value(s, "soak_device_xid_events_total", device="0") == 0.0
    assert value(s, "soak_device_xid_events_total", device="1") is None


def test_a_frozen_devices_gauges_are_dropped_not_repeated(exporter) -> None:
    frozen = device(0, 1900.0, frozen=True, failed=True)
    exporter.update(snapshot(1900.0, (frozen, device(1, 1900.0))))
    s = scrape(exporter.url)
    assert value(s, "soak_device_temperature_celsius", device="0") is None
    assert value(s, "soak_device_sm_clock_hertz", device="0") is None
    assert value(s, "soak_device_ecc_corrected_errors_total", device="0") is None
    assert value(s, "soak_device_clock_event_active", device="0") is None
    assert value(s, "soak_device_temperature_celsius", device="1") == 61.0
    assert value(s, "soak_device_failing", device="0") == 1.0
    assert value(s, "soak_device_failing", device="1") == 0.0


def test_cold_and_steady_figures_and_foreign_load_come_from_the_snapshot(exporter) -> None:
    cold = (Rate("gemm", 7.0e14, "FLOP"),)
    steady = (Rate("gemm", 6.6e14, "FLOP"),)
    row = Telemetry(0, 900.0, foreign_load_pct=40.0, foreign_procs=1, foreign_mem_mib=8192.0)
    exporter.update(snapshot(900.0, (device(0, 900.0, cold=cold, steady=steady, telemetry=row),)))
    s = scrape(exporter.url)
    assert value(s, "soak_device_cold_work_units_per_second", part="gemm") == 7.0e14
    assert value(s, "soak_device_steady_work_units_per_second", part="gemm") == 6.6e14
    assert value(s, "soak_device_foreign_load_ratio", device="0") == pytest.approx(0.4)
    assert value(s, "soak_device_foreign_processes", device="0") == 1
    assert value(s, "soak_device_foreign_memory_bytes", device="0") == 8 * 2**30
    exporter.update(snapshot(10.0, (device(0, 10.0),)))  # before the cold window is over
    assert value(scrape(exporter.url), "soak_device_cold_work_units_per_second") is None
