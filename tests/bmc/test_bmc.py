"""The BMC readers without a BMC: ipmitool's table, Redfish's resources, the inlet's choice,
and the sampling the runner drives (real services: tests/bmc/test_real_services.py)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from soak.bmc import BmcOptions, NoBmc, ServerSensors, open_bmc
from soak.bmc.base import Sensor, choose_inlet
from soak.bmc.ipmi import Lan, parse_sdr
from soak.bmc.redfish import RedfishTarget, summary_sensors, thermal_sensors
from soak.errors import BmcUnavailable, ConfigError
from soak.model import Capability

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "bmc"


def test_ipmitool_sdr_table_reads_every_sensor_and_a_missing_reading_is_none() -> None:
    sensors = parse_sdr((FIXTURES / "ipmitool-sdr-temperature.txt").read_text())
    by_name = {s.name: s for s in sensors}
    assert by_name["Inlet Temp"] == Sensor("Inlet Temp", 23.0, 55)
    assert by_name["PCH Temp"].value_c is None  # "ns", "No Reading": never 0
    assert by_name["GPU1 Temp"].value_c == 61.5
    assert len(sensors) == 6


def test_the_inlet_is_chosen_by_entity_then_name_and_a_wrong_name_lists_the_sensors() -> None:
    sensors = parse_sdr((FIXTURES / "ipmitool-sdr-temperature.txt").read_text())
    assert choose_inlet(sensors).name == "Inlet Temp"
    plain = [Sensor("CPU Temp", 40.0), Sensor("System Ambient", 22.0)]
    assert choose_inlet(plain).name == "System Ambient"
    with pytest.raises(ConfigError) as err:
        choose_inlet(plain, "Front Inlet")
    assert str(err.value) == (
        "--bmc-inlet-sensor: no sensor named 'Front Inlet' (found: 'CPU Temp', 'System Ambient')"
    )
    with pytest.raises(BmcUnavailable, match=r"no inlet sensor .*found: 'CPU Temp'"):
        choose_inlet([Sensor("CPU Temp", 40.0)])


def test_redfish_thermal_intake_and_thermal_subsystem_summary() -> None:
    thermal = {
        "Temperatures": [
            {"Name": "CPU Temp", "ReadingCelsius": 41, "PhysicalContext": "CPU"},
            {"Name": "Chassis Intake Temp", "ReadingCelsius": 25, "PhysicalContext": "Intake"},
            {"Name": "Off", "ReadingCelsius": 0, "Status": {"State": "Absent"}},
        ]
    }
    sensors = thermal_sensors(thermal)
    assert choose_inlet(sensors) == Sensor("Chassis Intake Temp", 25.0, context="Intake")
    assert sensors[2].value_c is None  # an absent sensor's 0 is no reading
    metrics = {"TemperatureSummaryCelsius": {"Intake": {"Reading": 21.5}, "Exhaust": {}}}
    summary = summary_sensors(metrics, "1U")
    assert summary[0] == Sensor("1U Intake (ThermalSubsystem)", 21.5, context="Intake")
    assert summary[1].value_c is None


class Scripted:
    """A BMC whose reads follow a script: a list of sensors, or an error to raise."""

    source = "scripted"

    def __init__(self, *answers: list[Sensor] | BmcUnavailable) -> None:
        self.answers = list(answers)

    def temperatures(self) -> list[Sensor]:
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, BmcUnavailable):
            raise answer
        return answer

    def close(self) -> None:
        pass


def test_sampling_every_10_s_and_a_failed_read_is_a_missing_reading() -> None:
    good = [Sensor("Inlet", 24.0, 55), Sensor("Exhaust", 35.0)]
    sensors = ServerSensors(Scripted(good, good, BmcUnavailable("timeout"), good))
    assert sensors.available and sensors.probe.line == "inlet: 'Inlet' from scripted"
    first = sensors.sample(0.0)
    assert [(r.series, r.value) for r in first] == [
        ("inlet_c", 24.0),
        ("chassis_temp_c:Exhaust", 35.0),
    ]
    assert sensors.sample(5.0) == []  # not due
    assert [(r.series, r.value) for r in sensors.sample(10.0)] == [("inlet_c", None)]


def test_a_bmc_that_refuses_is_one_line_and_not_a_zero() -> None:
    sensors = ServerSensors(Scripted(BmcUnavailable("redfish https://bmc: login refused")))
    assert not sensors.available
    assert sensors.probe.capability is Capability.NOT_SUPPORTED
    assert sensors.probe.line == "inlet not available: redfish https://bmc: login refused"
    assert sensors.sample(0.0) == []


def test_no_bmc_given_and_none_in_band_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("soak.bmc.IN_BAND_DEVICES", ("/nonexistent/ipmi0",))
    bmc = open_bmc(BmcOptions())
    assert isinstance(bmc, NoBmc)
    probe = ServerSensors(bmc).probe
    assert probe.line == (
        "inlet not available: no BMC given (--bmc HOST) and no in-band IPMI device (/dev/ipmi0)"
    )


def test_the_password_comes_only_from_the_environment_or_its_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"no password \(set SOAK_BMC_PASSWORD"):
        open_bmc(BmcOptions(host="bmc.example", protocol="ipmi"), env={})
    empty = tmp_path / "pw"
    empty.write_text("\n")
    with pytest.raises(ConfigError, match="empty"):
        open_bmc(BmcOptions(host="bmc.example", password_file=empty), env={})
    assert "s3cret" not in repr(Lan("h", "u", "s3cret"))
    assert "s3cret" not in repr(RedfishTarget("https://h", "u", "s3cret"))


class Slow(Scripted):
    """A BMC whose reads after the probe wait until the test lets them go."""

    def __init__(self, sensors: list[Sensor]) -> None:
        super().__init__(sensors)
        self.go = threading.Event()
        self.probed = False

    def temperatures(self) -> list[Sensor]:
        if self.probed:
            assert self.go.wait(5.0)
        self.probed = True
        return super().temperatures()


def test_a_slow_bmc_never_delays_a_tick_and_its_reading_keeps_the_time_it_was_asked() -> None:
    bmc = Slow([Sensor("Inlet", 26.0, 55)])
    sensors = ServerSensors(bmc, background=True)
    started = time.monotonic()
    assert sensors.sample(0.0) == []  # asked at 0 s, not answered yet
    assert sensors.sample(1.0) == [] and sensors.sample(12.0) == []  # one read at a time
    assert time.monotonic() - started < 0.5
    bmc.go.set()
    sensors._pending[1].join(5.0)  # type: ignore[index]
    assert [(r.t_s, r.value) for r in sensors.sample(13.0)] == [(0.0, 26.0)]
    sensors.close()
