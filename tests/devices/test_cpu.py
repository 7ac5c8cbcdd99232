"""The CPU backend against fake sysfs/procfs trees, one per kind of host, and against this
machine's real / ."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from soak.devices import cpu
from soak.devices.cpu import METRIC_SOURCES, CpuBackend
from soak.errors import BackendUnavailable, ConfigError
from soak.model import TELEMETRY_METRICS, Capability, Telemetry

NS = Capability.NOT_SUPPORTED

RICH_CPUINFO = "".join(
    f"processor\t: {n}\nvendor_id\t: GenuineIntel\n"
    f"model name\t: Intel(R) Xeon(R) Platinum 8480+\ncpu MHz\t\t: 1900.000\n"
    f"physical id\t: {n // 2}\ncore id\t\t: 0\n\n"
    for n in range(4)
)
STAT_1 = "cpu  100 0 100 700 100 0 0 0 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n"
STAT_2 = "cpu  400 0 200 1000 200 0 0 0 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n"
MEMINFO = "MemTotal:       16000000 kB\nMemFree:         1000000 kB\nMemAvailable:    4000000 kB\n"


class Clock:
    """A time_fn that tests move by hand."""

    def __init__(self, t: float = 100.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def write(root: Path, files: dict[str, str | int]) -> None:
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{content}\n")


def procfs(cpuinfo: str = RICH_CPUINFO) -> dict[str, str | int]:
    return {"proc/cpuinfo": cpuinfo, "proc/stat": STAT_1, "proc/meminfo": MEMINFO}


def hwmon(n: int, name: str, files: dict[str, str | int]) -> dict[str, str | int]:
    base = f"sys/class/hwmon/hwmon{n}"
    return {f"{base}/name": name} | {f"{base}/{k}": v for k, v in files.items()}


def rapl(n: int, energy_uj: int, max_range: int, limit_uw: int | None) -> dict[str, str | int]:
    base = f"sys/class/powercap/intel-rapl:{n}"
    files: dict[str, str | int] = {
        f"{base}/name": f"package-{n}",
        f"{base}/energy_uj": energy_uj,
        f"{base}/max_energy_range_uj": max_range,
        # a subdomain, which must not be counted on top of its package
        f"{base}/intel-rapl:{n}:0/name": "core",
        f"{base}/intel-rapl:{n}:0/energy_uj": 123,
        f"sys/class/powercap/intel-rapl:{n}:0/name": "core",
        f"sys/class/powercap/intel-rapl:{n}:0/energy_uj": 999_999,
        f"sys/class/powercap/intel-rapl:{n}:0/max_energy_range_uj": 10**12,
    }
    if limit_uw is not None:
        files[f"{base}/constraint_0_power_limit_uw"] = limit_uw
    return files


def rich_host(root: Path) -> None:
    """Two Intel sockets with every sensor Linux can give: coretemp with crit/max, cpufreq
    on 4 CPUs, RAPL on both packages (socket 1's counter about to wrap), DIMM sensors, a fan
    with pwm, EDAC on two memory controllers, plus decoys that must be ignored."""
    files = procfs()
    files |= hwmon(0, "coretemp", {
        "temp1_label": "Package id 0", "temp1_input": 65000, "temp1_crit": 100000,
        "temp1_max": 90000, "temp2_label": "Core 0", "temp2_input": 99000,
    })  # fmt: skip
    files |= hwmon(1, "coretemp", {
        "temp1_label": "Package id 1", "temp1_input": 71000, "temp1_crit": 100000,
        "temp1_max": 88000,
    })  # fmt: skip
    files |= hwmon(2, "nvme", {"temp1_label": "Composite", "temp1_input": 120000})
    files |= hwmon(3, "jc42", {"temp1_input": 45500})
    files |= hwmon(4, "jc42", {"temp1_input": 41000})
    files |= hwmon(10, "nct6775", {"fan1_input": 1200, "pwm1": 128, "pwm1_enable": 5, "pwm2": 255})
    for n, khz in enumerate((1_000_000, 2_000_000, 3_000_000, 4_000_000)):
        base = f"sys/devices/system/cpu/cpu{n}/cpufreq"
        files |= {f"{base}/scaling_cur_freq": khz, f"{base}/cpuinfo_max_freq": 3_800_000}
    files |= rapl(0, 1_000_000, 262_143_328_850, 205_000_000)
    files |= rapl(1, 9_500_000, 10_000_000, 205_000_000)
    files |= {"sys/class/thermal/thermal_zone0/type": "acpitz"}
    files |= {"sys/class/thermal/thermal_zone0/temp": 27800}
    for mc, (ce, ue) in enumerate(((3, 0), (2, 1))):
        base = f"sys/devices/system/edac/mc/mc{mc}"
        files |= {f"{base}/ce_count": ce, f"{base}/ue_count": ue}
    write(root, files)


def amd_host(root: Path) -> None:
    """One EPYC socket: k10temp Tctl and CCD sensors, RAPL energy without a power-limit
    constraint, no cpufreq (so the clock falls back to /proc/cpuinfo)."""
    cpuinfo = "".join(
        f"processor\t: {n}\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 9654\n"
        f"cpu MHz\t\t: {mhz}\nphysical id\t: 0\ncore id\t\t: {n}\n\n"
        for n, mhz in enumerate(("3000.000", "3500.000"))
    )
    files = procfs(cpuinfo)
    files |= hwmon(0, "k10temp", {
        "temp1_label": "Tctl", "temp1_input": 75500, "temp3_label": "Tccd1",
        "temp3_input": 80000,
    })  # fmt: skip
    files |= rapl(0, 5_000_000, 65_532_610_987, None)
    write(root, files)


def bare_host(root: Path) -> None:
    """Like the VM these tests were written on: /proc only, no sensors at all."""
    cpuinfo = (
        "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC\n"
        "cpu MHz\t\t: 2596.124\nphysical id\t: 0\ncore id\t\t: 0\n\n"
    )
    write(root, procfs(cpuinfo))
    (root / "sys/class/thermal").mkdir(parents=True)


def sample(backend: CpuBackend, clock: Clock, at: float) -> Telemetry:
    clock.t = at
    (telemetry,) = backend.sample(at)
    return telemetry


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def rich(tmp_path: Path, clock: Clock) -> CpuBackend:
    rich_host(tmp_path)
    return CpuBackend(root=tmp_path, time_fn=clock)


def test_sources_table_covers_every_telemetry_metric_once() -> None:
    listed = [m for src in METRIC_SOURCES for m in src.metrics]
    assert sorted(listed) == sorted(TELEMETRY_METRICS)


def test_rich_host_inventory(rich: CpuBackend) -> None:
    (info,) = rich.devices()
    assert info.index == 0 and info.backend == "cpu" and info.torch_device == "cpu"
    assert info.name == "Intel(R) Xeon(R) Platinum 8480+"
    assert info.worker_env == {}
    assert info.memory_total_b == 16_000_000 * 1024
    assert info.power_limit_w == pytest.approx(410.0)
    assert info.max_sm_clock_mhz == pytest.approx(3800.0)
    assert info.slowdown_temp_c == pytest.approx(100.0)
    assert info.max_operating_temp_c == pytest.approx(88.0)
    assert info.shutdown_temp_c is None
    assert (info.extra["sockets"], info.extra["cores"], info.extra["threads"]) == (2, 2, 4)
    sources = info.extra["sources"]
    assert sources["temp_c"] == "hwmon coretemp 'Package id 0', 'Package id 1'"
    assert sources["sm_clock_mhz"] == "cpufreq scaling_cur_freq"
    assert sources["power_w"] == "powercap intel-rapl:0 (package-0), intel-rapl:1 (package-1)"


def test_rich_host_capabilities(rich: CpuBackend) -> None:
    caps = rich.capabilities()[0]
    assert set(caps) == set(TELEMETRY_METRICS)
    readable = {m for m, c in caps.items() if c is Capability.SUPPORTED}
    assert readable == {
        "temp_c", "mem_temp_c", "sm_clock_mhz", "power_w", "energy_j", "power_limit_w",
        "util_pct", "mem_util_pct", "fan_pct", "ecc_corrected", "ecc_uncorrected",
    }  # fmt: skip
    assert all(caps[m] is NS for m in cpu.NO_CPU_NOTION)


def test_rich_host_first_sample(rich: CpuBackend, clock: Clock) -> None:
    t = sample(rich, clock, 100.0)
    assert t.device == 0 and t.t_s == 100.0
    assert t.temp_c == pytest.approx(71.0)  # hottest package, not the 99 °C core, not nvme
    assert t.mem_temp_c == pytest.approx(45.5)
    assert t.sm_clock_mhz == pytest.approx(2500.0)  # cpufreq mean, not cpuinfo's 1900
    assert t.power_w is None  # no delta yet
    assert t.energy_j == pytest.approx(10.5)  # raw counters 1 J + 9.5 J
    assert t.power_limit_w == pytest.approx(410.0)
    assert t.util_pct is None  # no delta yet
    assert t.mem_util_pct == pytest.approx(75.0)
    assert t.fan_pct == pytest.approx(128 / 255 * 100)  # pwm2 has no fan and is ignored
    assert (t.ecc_corrected, t.ecc_uncorrected) == (5, 1)
    assert t.clock_reasons is None and t.mem_clock_mhz is None and t.pcie_replay is None


def test_rich_host_power_from_energy_delta_across_a_wrap(
    rich: CpuBackend, clock: Clock, tmp_path: Path
) -> None:
    sample(rich, clock, 100.0)
    write(tmp_path, {
        "sys/class/powercap/intel-rapl:0/energy_uj": 301_000_000,  # +300 J
        "sys/class/powercap/intel-rapl:1/energy_uj": 1_500_000,  # wrapped at 10 J: +2 J
        "proc/stat": STAT_2,
    })  # fmt: skip
    t = sample(rich, clock, 102.0)
    assert t.power_w == pytest.approx(302.0 / 2.0)
    assert t.energy_j == pytest.approx(10.5 + 302.0)
    assert t.util_pct == pytest.approx(50.0)  # busy +400 of +800 jiffies; iowait is idle


def test_rapl_wrap_on_a_single_package(tmp_path: Path, clock: Clock) -> None:
    write(tmp_path, procfs() | rapl(0, 990, 1000, None))
    backend = CpuBackend(root=tmp_path, time_fn=clock)
    sample(backend, clock, 100.0)
    write(tmp_path, {"sys/class/powercap/intel-rapl:0/energy_uj": 10})
    t = sample(backend, clock, 100.5)
    assert t.power_w == pytest.approx(20e-6 / 0.5)  # 990 -> 1000 -> 0 -> 10: +20 µJ
    assert t.energy_j == pytest.approx(1010e-6)


def test_amd_host(tmp_path: Path, clock: Clock) -> None:
    amd_host(tmp_path)
    backend = CpuBackend(root=tmp_path, time_fn=clock)
    caps = backend.capabilities()[0]
    assert caps["temp_c"] is Capability.SUPPORTED
    assert caps["power_w"] is Capability.SUPPORTED
    assert caps["power_limit_w"] is NS
    assert caps["sm_clock_mhz"] is Capability.FALLBACK
    (info,) = backend.devices()
    assert info.name == "AMD EPYC 9654"
    assert info.extra["sources"]["sm_clock_mhz"] == "cpuinfo"
    assert info.extra["sources"]["temp_c"] == "hwmon k10temp 'Tctl'"
    assert info.power_limit_w is None and info.slowdown_temp_c is None
    t = sample(backend, clock, 100.0)
    assert t.temp_c == pytest.approx(75.5)  # Tctl, not the hotter CCD sensor
    assert t.sm_clock_mhz == pytest.approx(3250.0)
    assert t.power_limit_w is None


@pytest.mark.parametrize(
    ("driver", "labels", "expected"),
    [
        ("coretemp", {"Core 0": 90000, "Package id 0": 60000}, 60.0),
        ("k10temp", {"Tctl": 70000, "Tdie": 60000}, 60.0),
        ("zenpower", {"Tctl": 70000, "Tccd1": 80000}, 70.0),
    ],
)
def test_package_sensor_choice(
    tmp_path: Path, clock: Clock, driver: str, labels: dict[str, int], expected: float
) -> None:
    files: dict[str, str | int] = {}
    for n, (label, value) in enumerate(labels.items(), start=1):
        files |= {f"temp{n}_label": label, f"temp{n}_input": value}
    write(tmp_path, procfs() | hwmon(0, driver, files))
    t = sample(CpuBackend(root=tmp_path, time_fn=clock), clock, 1.0)
    assert t.temp_c == pytest.approx(expected)


def test_thermal_zone_fallback_prefers_x86_pkg_temp(tmp_path: Path, clock: Clock) -> None:
    zones = "sys/class/thermal/"
    write(tmp_path, procfs() | {
        zones + "thermal_zone0/type": "acpitz", zones + "thermal_zone0/temp": 27800,
        zones + "thermal_zone1/type": "x86_pkg_temp", zones + "thermal_zone1/temp": 58000,
        zones + "thermal_zone1/trip_point_0_type": "passive",
        zones + "thermal_zone1/trip_point_0_temp": 0,  # unset: not a threshold
        zones + "thermal_zone1/trip_point_1_type": "critical",
        zones + "thermal_zone1/trip_point_1_temp": 105000,
    })  # fmt: skip
    backend = CpuBackend(root=tmp_path, time_fn=clock)
    assert backend.capabilities()[0]["temp_c"] is Capability.SUPPORTED
    (info,) = backend.devices()
    assert info.extra["sources"]["temp_c"] == "thermal_zone x86_pkg_temp thermal_zone1"
    assert info.shutdown_temp_c == pytest.approx(105.0)
    assert info.slowdown_temp_c is None
    assert sample(backend, clock, 1.0).temp_c == pytest.approx(58.0)


def test_acpitz_only_is_a_fallback(tmp_path: Path, clock: Clock) -> None:
    zone = "sys/class/thermal/thermal_zone0/"
    write(tmp_path, procfs() | {zone + "type": "acpitz", zone + "temp": 27800})
    backend = CpuBackend(root=tmp_path, time_fn=clock)
    assert backend.capabilities()[0]["temp_c"] is Capability.FALLBACK
    assert sample(backend, clock, 1.0).temp_c == pytest.approx(27.8)


def test_bare_host_reads_none_and_says_not_supported(tmp_path: Path, clock: Clock) -> None:
    bare_host(tmp_path)
    backend = CpuBackend(root=tmp_path, time_fn=clock)
    caps = backend.capabilities()[0]
    readable = {"util_pct", "mem_util_pct", "sm_clock_mhz"}
    assert all(caps[m] is NS for m in TELEMETRY_METRICS if m not in readable)
    assert caps["sm_clock_mhz"] is Capability.FALLBACK
    sample(backend, clock, 1.0)
    t = sample(backend, clock, 2.0)
    values = {m: getattr(t, m) for m in TELEMETRY_METRICS}
    assert all(values[m] is None for m in TELEMETRY_METRICS if m not in readable)
    assert t.sm_clock_mhz == pytest.approx(2596.124)
    (info,) = backend.devices()
    assert info.power_limit_w is None and info.max_sm_clock_mhz is None
    assert info.slowdown_temp_c is None and info.shutdown_temp_c is None


def failing_energy(real: Callable[[Path], str]) -> Callable[[Path], str]:
    """A reader that refuses RAPL energy counters as a non-root user's kernel does: tests
    may run as root, where chmod 000 would not stop the read."""

    def read(path: Path) -> str:
        if path.name == "energy_uj":
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    return read


def test_rapl_energy_root_only_is_no_permission(
    rich: CpuBackend, tmp_path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cpu, "_read_text", failing_energy(cpu._read_text))
    backend = CpuBackend(root=tmp_path, time_fn=clock)
    caps = backend.capabilities()[0]
    assert caps["power_w"] is Capability.NO_PERMISSION
    assert caps["energy_j"] is Capability.NO_PERMISSION
    assert caps["power_limit_w"] is Capability.SUPPORTED
    sample(backend, clock, 1.0)
    t = sample(backend, clock, 2.0)
    assert t.power_w is None and t.energy_j is None
    assert t.power_limit_w == pytest.approx(410.0)


def test_sensor_vanishing_mid_run_is_none_and_warns_once(
    rich: CpuBackend, tmp_path: Path, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    sample(rich, clock, 1.0)
    (tmp_path / "sys/class/hwmon/hwmon1/temp1_input").unlink()
    with caplog.at_level(logging.WARNING, logger="soak.devices.cpu"):
        first, second = sample(rich, clock, 2.0), sample(rich, clock, 3.0)
    assert first.temp_c is None and second.temp_c is None  # not socket 0's 65 °C alone
    assert first.mem_temp_c == pytest.approx(45.5)  # other sources unaffected
    assert len([r for r in caplog.records if "stopped reading" in r.message]) == 1


def test_implausible_temperature_is_none_not_a_reading(
    rich: CpuBackend, tmp_path: Path, clock: Clock
) -> None:
    sensor = tmp_path / "sys/class/hwmon/hwmon1/temp1_input"
    sensor.write_text("255000\n")  # a disconnected sensor's full scale
    assert sample(rich, clock, 1.0).temp_c is None
    for hwmon in (0, 1):
        (tmp_path / f"sys/class/hwmon/hwmon{hwmon}/temp1_input").write_text("0\n")
    assert sample(rich, clock, 2.0).temp_c is None  # 0 °C: no sensor, not a cold CPU
    sensor.write_text("71000\n")
    (tmp_path / "sys/class/hwmon/hwmon0/temp1_input").write_text("65000\n")
    assert sample(rich, clock, 3.0).temp_c == pytest.approx(71.0)


def test_rapl_read_failure_keeps_the_delta_honest(
    rich: CpuBackend, tmp_path: Path, clock: Clock
) -> None:
    sample(rich, clock, 100.0)
    energy = tmp_path / "sys/class/powercap/intel-rapl:0/energy_uj"
    energy.unlink()
    assert sample(rich, clock, 101.0).power_w is None
    write(tmp_path, {"sys/class/powercap/intel-rapl:0/energy_uj": 41_000_000})
    write(tmp_path, {"sys/class/powercap/intel-rapl:1/energy_uj": 9_500_000})
    assert sample(rich, clock, 104.0).power_w == pytest.approx(40.0 / 4.0)  # over all 4 s


@pytest.mark.parametrize("devices", [(1,), (0, 1), (0, 0), ()])
def test_devices_other_than_zero_is_a_config_error(tmp_path: Path, devices: tuple[int]) -> None:
    bare_host(tmp_path)
    with pytest.raises(ConfigError, match="--devices"):
        CpuBackend(devices=devices, root=tmp_path)


def test_device_zero_and_protocol_odds(tmp_path: Path) -> None:
    bare_host(tmp_path)
    backend = CpuBackend(devices=(0,), root=tmp_path)
    assert backend.name == "cpu"
    assert backend.simulated_load("gemm") is None
    assert backend.poll_events(1.0) == []
    backend.close()


def test_no_proc_means_backend_unavailable(tmp_path: Path) -> None:
    with pytest.raises(BackendUnavailable, match="/proc"):
        CpuBackend(root=tmp_path)


def _real_sensors() -> list[str]:
    found = [str(p) for p in Path("/sys/class/hwmon").glob("hwmon*/temp*_input")]
    found += [str(p) for p in Path("/sys/class/thermal").glob("thermal_zone*/temp")]
    found += [str(p) for p in Path("/sys/class/powercap").glob("intel-rapl:*/energy_uj")]
    return found


@pytest.mark.skipif(
    bool(_real_sensors()),
    reason="this host has temperature or RAPL sensors; the test is for hosts without them",
)
def test_this_sensorless_host_reads_none_not_zero() -> None:
    backend = CpuBackend()
    caps = backend.capabilities()[0]
    assert caps["temp_c"] is NS and caps["power_w"] is NS and caps["energy_j"] is NS
    (t,) = backend.sample(0.0)
    assert t.temp_c is None and t.power_w is None and t.energy_j is None


def test_this_host_proc_readings() -> None:
    backend = CpuBackend()
    (info,) = backend.devices()
    assert info.memory_total_b is not None and info.memory_total_b > 0
    assert info.extra["threads"] >= 1
    backend.sample(0.0)
    (t,) = backend.sample(0.1)
    assert t.util_pct is None or 0.0 <= t.util_pct <= 100.0  # None if no jiffy passed
    assert t.mem_util_pct is not None and 0.0 < t.mem_util_pct < 100.0


def test_ranks_show_the_cpu_as_one_device_per_rank_sharing_its_telemetry(
    tmp_path: Path, clock: Clock
) -> None:
    rich_host(tmp_path)
    backend = CpuBackend(root=tmp_path, time_fn=clock, ranks=3)
    devices = backend.devices()
    assert [d.index for d in devices] == [0, 1, 2]
    assert {d.name for d in devices} == {devices[0].name}  # peers of one kind
    assert [d.extra["rank"] for d in devices] == [0, 1, 2]
    assert all(d.torch_device == "cpu" and "OMP_NUM_THREADS" in d.worker_env for d in devices)
    assert set(backend.capabilities()) == {0, 1, 2}
    clock.t = 5.0
    readings = backend.sample(5.0)
    assert [t.device for t in readings] == [0, 1, 2]
    assert len({(t.temp_c, t.sm_clock_mhz) for t in readings}) == 1
    with pytest.raises(ConfigError, match="--devices: cpu has no device 3"):
        CpuBackend(devices=[3], root=tmp_path, time_fn=clock, ranks=3)


def _pid_stat(pid: int, name: str, utime: int, stime: int, cutime: int = 0) -> str:
    """A /proc/PID/stat line with the given CPU times (clock ticks); the rest is filler."""
    fields = ["S", "1", *["0"] * 9, str(utime), str(stime), str(cutime), "0", *["0"] * 30]
    return f"{pid} ({name}) {' '.join(fields)}"


def test_foreign_load_is_busy_and_steal_time_less_soaks_own_processes(tmp_path: Path) -> None:
    # soak (pid 100) and its worker (pid 101, a child of 100); user nice system idle iowait
    # irq softirq steal, over 4 CPUs
    write(tmp_path, {
        "proc/stat": "cpu  1000 0 200 4000 0 0 0 0 0 0\n",
        "proc/100/stat": _pid_stat(100, "soak run", 50, 10),
        "proc/100/task/100/children": "101",
        "proc/101/stat": _pid_stat(101, "python (spawn)", 400, 40),
        "proc/101/task/101/children": "",
    })  # fmt: skip
    reader = cpu.ForeignLoadReader(tmp_path, 100)
    assert reader.read(0.0) == {"foreign_load_pct": None}  # no delta yet
    # 400 jiffies pass (4 CPUs x 100): 300 busy (60 of them steal), soak's own used 180
    write(tmp_path, {
        "proc/stat": "cpu  1200 0 240 4100 0 0 0 60 0 0\n",
        "proc/100/stat": _pid_stat(100, "soak run", 55, 15),
        "proc/101/stat": _pid_stat(101, "python (spawn)", 560, 50),
    })  # fmt: skip
    assert reader.read(1.0) == {"foreign_load_pct": pytest.approx(100 * (300 - 180) / 400)}
    # the worker ends and is reaped: its time moves into soak's cutime, not foreign load
    write(tmp_path, {
        "proc/stat": "cpu  1300 0 260 4380 0 0 0 60 0 0\n",
        "proc/100/stat": _pid_stat(100, "soak run", 56, 15, cutime=610),
        "proc/100/task/100/children": "",
    })  # fmt: skip
    (tmp_path / "proc/101/stat").unlink()
    assert reader.read(2.0) == {"foreign_load_pct": 0.0}


def test_this_host_reads_its_foreign_load_as_a_share() -> None:
    backend = CpuBackend()
    if backend.capabilities()[0]["foreign_load_pct"] is not Capability.SUPPORTED:
        pytest.skip("this kernel has no /proc/PID/task/PID/children: soak cannot tell its own")
    backend.sample(0.0)
    (t,) = backend.sample(0.1)
    assert t.foreign_load_pct is None or 0.0 <= t.foreign_load_pct <= 100.0
    assert t.foreign_procs is None and t.foreign_mem_mib is None
