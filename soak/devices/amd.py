"""AMD Instinct telemetry through ``amdsmi`` (the optional extra ``soak[amd]``).

The only module in soak that imports ``amdsmi``. It keeps amdsmi's calls and tables only; the
probe, the per-tick snapshot and lost devices are `soak.devices.common.VendorBackend`'s, the
same as NVML's (including what "supported" means). Every vendor call goes through
`AmdQuery.call`, which translates amdsmi's status codes into soak's exceptions (`_STATUS`);
each tick reads the declared table `METRICS`, whose ways the probe at start picks once per
device; "N/A" and all-ones values become ``None``.

Choices where AMD and NVIDIA differ (the report compares GPUs of one vendor at a time):

* ``temp_c`` is the hotspot (junction) sensor: like NVIDIA's GPU temperature it is an on-die
  reading, and it is the one AMD's firmware throttles on. The edge sensor (lower, and absent on
  MI300) is not recorded per tick. ``mem_temp_c`` is the VRAM (HBM) sensor.
* ``energy_j`` is amdsmi's energy accumulator × its resolution (µJ). The counter has been seen
  to stall on some driver versions, so every 30 s of load it is checked against power
  integrated over time; if the two differ by more than 20 % the backend switches to the
  integral for good (capability FALLBACK, one WARNING event), continuing from the last value
  it trusted.
* ``clock_reasons`` maps AMD throttle reasons onto NVIDIA's bits only where the behaviour is
  the same (`_THROTTLE_BITS`): power and current limits → SW_POWER_CAP, firmware temperature
  limits → SW_THERMAL, PROCHOT/VRHOT (an external hot signal) → HW_SLOWDOWN. Bits with no
  honest equivalent (PPM, FIT) are not put in the mask; the first time a device shows one, a
  WARNING event records the raw value.
* ``power_violation_s``/``thermal_violation_s`` come from the PVIOL/TVIOL counters of
  ``amdsmi_get_violation_status`` (MI300 and newer): the fraction of firmware samples in
  violation between two ticks times the time between them, summed (capability FALLBACK,
  since it is derived, not a hardware time counter).
* ``remap_pending``/``remap_failure``/``retired_pages`` come from the bad-page list: a page
  pending retirement, a page that could not be retired, and the retired (reserved) pages.
* No GPU reset/RAS event stream is read: ``xid_events`` is "not supported" on AMD.

Worker environment: ``ROCR_VISIBLE_DEVICES=<HIP UUID>`` selects the GPU at the ROCr level,
stable under any enumeration order; ``HIP_VISIBLE_DEVICES=0`` (and ``CUDA_VISIBLE_DEVICES=0``,
which PyTorch on ROCm also reads) then name the one GPU left, so ``cuda:0`` is this device.
Without a HIP UUID (amdsmi before 6.4) the backend falls back to ``HIP_VISIBLE_DEVICES=<HIP
index>``, correct only when the parent environment sets no ROCR_VISIBLE_DEVICES.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from soak.devices.common import (
    Call,
    ComputeProcess,
    Device,
    EnergyIntegrator,
    LogOnce,
    Metric,
    Pending,
    Query,
    VendorBackend,
    Way,
    by_call,
    clean_number,
    pct,
    positive,
    select,
    temp_ok,
)
from soak.errors import (
    BackendUnavailable,
    FunctionMissing,
    NoPermission,
    NotSupported,
    SoakError,
)
from soak.model import Capability, ClockReason, DeviceInfo, EventKind

try:
    import amdsmi
except ImportError:
    amdsmi = None
    _IMPORT_PROBLEM = "amdsmi not installed (pip install soak[amd])"
except (OSError, KeyError, AttributeError) as _exc:  # the package is there, its library is not
    amdsmi = None
    _IMPORT_PROBLEM = f"amdsmi installed but its library does not load ({_exc})"
else:
    _IMPORT_PROBLEM = ""

log = logging.getLogger(__name__)

SUPPORTED = Capability.SUPPORTED


# --------------------------------------------------------------------------------------------
# Errors


class _ReadFailed(SoakError):
    """A read failed for a reason that says nothing about support (busy, retry, no data)."""


class _Suspect(_ReadFailed):
    """An I/O-like failure: a lost GPU or a missing sensor file; the caller checks which."""


# amdsmi status names (from amdsmi.amdsmi_wrapper) → soak exception; unlisted ones: _ReadFailed.
_STATUS: dict[str, type[SoakError]] = {
    "AMDSMI_STATUS_NOT_SUPPORTED": NotSupported,
    "AMDSMI_STATUS_NOT_YET_IMPLEMENTED": NotSupported,
    "AMDSMI_STATUS_NO_PERM": NoPermission,
    "AMDSMI_STATUS_FAIL_LOAD_SYMBOL": FunctionMissing,
    "AMDSMI_STATUS_FAIL_LOAD_MODULE": BackendUnavailable,
    "AMDSMI_STATUS_INIT_ERROR": BackendUnavailable,
    "AMDSMI_STATUS_NOT_INIT": BackendUnavailable,
    "AMDSMI_STATUS_DRIVER_NOT_LOADED": BackendUnavailable,
    "AMDSMI_STATUS_NOT_FOUND": _Suspect,
    "AMDSMI_STATUS_FILE_ERROR": _Suspect,
    "AMDSMI_STATUS_IO": _Suspect,
    "AMDSMI_STATUS_DRM_ERROR": _Suspect,
    "AMDSMI_STATUS_API_FAILED": _Suspect,
    "AMDSMI_STATUS_UNKNOWN_ERROR": _Suspect,
}


def _status_name(code: int) -> str:
    """amdsmi's name for a status code, read from the binding itself."""
    wrapper = getattr(amdsmi, "amdsmi_wrapper", None)
    for name in _STATUS:
        if getattr(wrapper, name, None) == code:
            return name
    for name in dir(wrapper):
        if name.startswith("AMDSMI_STATUS_") and getattr(wrapper, name) == code:
            return name
    return f"AMDSMI_STATUS_{code}"


def translate(exc: Exception, func: str, device: int | None) -> SoakError:
    """soak's exception for an amdsmi one raised by ``func``; the amdsmi error is the cause."""
    out: SoakError
    code = getattr(exc, "err_code", None)
    if code is None and _is(exc, "AmdSmiParameterException"):
        out = FunctionMissing(f"{func}: {exc}")  # our arguments do not fit this binding
    elif code is None:
        out = _ReadFailed(f"{func}: {exc}")
    else:
        name = _status_name(abs(int(code)))
        kind = _STATUS.get(name, _ReadFailed)
        out = kind(f"{func}: {name}")
    out.__cause__ = exc
    return out


def _is(exc: Exception, class_name: str) -> bool:
    cls = getattr(amdsmi, class_name, None)
    return isinstance(cls, type) and isinstance(exc, cls)


def _error_name(exc: BaseException) -> str:
    cause = exc.__cause__
    if cause is not None and getattr(cause, "err_code", None) is not None:
        return _status_name(abs(int(cause.err_code)))
    return type(cause or exc).__name__


class AmdQuery(Query):
    """Calls amdsmi, translates its errors, and logs each problem once (a bounded set)."""

    def __init__(self) -> None:
        super().__init__(
            LogOnce(log, "amd"), "amdsmi", lambda: amdsmi, lambda: amdsmi.AmdSmiException, translate
        )


# --------------------------------------------------------------------------------------------
# Declared reads


_UINT_MAX = frozenset({0xFF, 0xFFFF, 0xFFFF_FFFF, 0xFFFF_FFFF_FFFF_FFFF})


def _number(v: Any) -> float | int | None:
    """A reading as a number; amdsmi's "N/A", all-ones and impossible values are None."""
    return clean_number(v, _UINT_MAX) if isinstance(v, int | float) else None


def _key(*names: str, then: Callable[[Any], Any] = lambda v: v) -> Callable[[Any], Any]:
    """The first of ``names`` in a returned dict that holds a number, converted."""

    def get(d: Any) -> Any:
        if not isinstance(d, Mapping):
            return None
        for name in names:
            value = _number(d.get(name))
            if value is not None:
                return then(value)
        return None

    get.__name__ = f"key_{names[0]}"
    return get


def _text_key(*names: str) -> Callable[[Any], str | None]:
    def get(d: Any) -> str | None:
        for name in names:
            value = d.get(name) if isinstance(d, Mapping) else None
            if isinstance(value, str) and value.strip() and value.strip() != "N/A":
                return value.strip()
        return None

    return get


def _text(v: Any) -> str | None:
    return v.strip() if isinstance(v, str) and v.strip() and v.strip() != "N/A" else None


def _celsius(v: float) -> float:
    """°C; a reading over 1000 can only be m°C (older amdsmi passed sysfs values through)."""
    return v / 1000 if v > 1000 else v


def _micro_w(v: float) -> float:
    """amdsmi power caps are µW; a value that small can only already be W."""
    return v / 1e6 if v > 100_000 else v


def _mib(v: float) -> int:
    return int(v) * 2**20


def _fan_pct(v: Any) -> float | None:
    speed = _number(v)
    return None if speed is None else speed * 100 / 255  # AMDSMI_MAX_FAN_SPEED


def _energy_j(d: Any) -> float | None:
    """Accumulator (key 'energy_accumulator', 'power' in older bindings) × resolution µJ → J."""
    if not isinstance(d, Mapping):
        return None
    count = _number(d.get("energy_accumulator", d.get("power")))
    resolution = d.get("counter_resolution")
    if count is None or not isinstance(resolution, int | float) or resolution <= 0:
        return None
    return count * resolution / 1e6


def _counter_pair(name: str) -> Callable[[Any], tuple[int, int] | None]:
    """(firmware sample counter, samples in violation) from amdsmi_get_violation_status."""

    def get(d: Any) -> tuple[int, int] | None:
        if not isinstance(d, Mapping):
            return None
        total, hits = _number(d.get("acc_counter")), _number(d.get(name))
        return None if total is None or hits is None else (int(total), int(hits))

    get.__name__ = f"pair_{name}"
    return get


# Page status values of AmdSmiMemoryPageStatus: RESERVED 0, PENDING 1, UNRESERVABLE 2.
_PAGE_STATUS = {"RESERVED": 0, "PENDING": 1, "UNRESERVABLE": 2}


def _pages(status: str, *, flag: bool = False) -> Callable[[Any], int | None]:
    """Bad pages with one status: their count, or 0/1 whether there is any."""

    def get(pages: Any) -> int | None:
        if isinstance(pages, str):  # older bindings answer "No bad pages found."
            return 0 if "no bad pages" in pages.lower() else None
        if not isinstance(pages, list):
            return None
        wanted, known = _PAGE_STATUS[status], set(_PAGE_STATUS.values())

        def counts(page: Any) -> bool:
            # A bad page whose status cannot be read counts under every status: the worst
            # case, rather than a bad page that counts nowhere.
            found = _number(page.get("status")) if isinstance(page, Mapping) else None
            return found == wanted or found not in known

        n = sum(1 for p in pages if counts(p))
        return int(n > 0) if flag else n

    get.__name__ = f"pages_{status.lower()}"
    return get


def _path(*keys: str) -> Callable[[Any], Any]:
    def get(d: Any) -> Any:
        for k in keys:
            if not isinstance(d, Mapping):
                return None
            d = d.get(k)
        return _number(d)

    return get


# indep_throttle_status bit (kernel SMU_THROTTLER_*_BIT) → the NVIDIA bit of the same behaviour.
_THROTTLE_BITS: dict[int, ClockReason] = {
    **dict.fromkeys(range(0, 8), ClockReason.SW_POWER_CAP),  # PPT0-3, SPL, FPPT, SPPT, SPPT_APU
    **dict.fromkeys(range(16, 24), ClockReason.SW_POWER_CAP),  # TDC/EDC current limits, APCC
    **dict.fromkeys(range(32, 44), ClockReason.SW_THERMAL),  # TEMP_* firmware thermal limits
    **dict.fromkeys(range(44, 48), ClockReason.HW_SLOWDOWN),  # VRHOT0/1, PROCHOT_CPU/GFX
}
_THROTTLE_MASK = sum(1 << b for b in _THROTTLE_BITS)

# amdsmi_get_violation_status active_* flag (MI300 and newer) → NVIDIA bit.
_VIOLATION_BITS: dict[str, ClockReason] = {
    "active_ppt_pwr": ClockReason.SW_POWER_CAP,
    "active_socket_thrm": ClockReason.SW_THERMAL,
    "active_hbm_thrm": ClockReason.SW_THERMAL,
    "active_vr_thrm": ClockReason.SW_THERMAL,
    "active_prochot_thrm": ClockReason.HW_SLOWDOWN,
}


def _throttle_reasons(d: Any) -> tuple[int, int] | None:
    """gpu_metrics indep_throttle_status → (mapped ClockReason bits, unmapped raw bits)."""
    raw = _key("indep_throttle_status")(d)
    if raw is None:
        return None
    mapped = ClockReason.NONE
    for bit, reason in _THROTTLE_BITS.items():
        if raw & (1 << bit):
            mapped |= reason
    return int(mapped), int(raw) & ~_THROTTLE_MASK


def _violation_reasons(d: Any) -> tuple[int, int] | None:
    """active_* violation flags (MI300 and newer) → (mapped ClockReason bits, 0).

    Every flag must be readable: a flag reading "N/A" is not a flag that is off, and an
    unreadable PROCHOT must not pass for "no HW slowdown". Then None: this tick's reasons
    are not available (at the probe, the next way, indep_throttle_status, is tried)."""
    if not isinstance(d, Mapping):
        return None
    flags = {k: d.get(k) for k in _VIOLATION_BITS}
    if not all(isinstance(v, bool | int) for v in flags.values()):
        return None
    mapped = ClockReason.NONE
    for name, reason in _VIOLATION_BITS.items():
        if flags[name] is True or (isinstance(flags[name], int) and flags[name] == 1):
            mapped |= reason
    return int(mapped), 0


_TEMP = "amdsmi_get_temp_metric"
_HOT = "AmdSmiTemperatureType.HOTSPOT"
_JUNCTION = "AmdSmiTemperatureType.JUNCTION"
_VRAM = "AmdSmiTemperatureType.VRAM"
_NOW = "AmdSmiTemperatureMetric.CURRENT"
_METRICS_INFO = "amdsmi_get_gpu_metrics_info"
_VIOLATION = "amdsmi_get_violation_status"
_CLOCK = "amdsmi_get_clock_info"
_BAD_PAGES = "amdsmi_get_gpu_bad_page_info"


def _scalar(then: Callable[[Any], Any] = lambda v: v) -> Callable[[Any], Any]:
    """A plain number answer, sentinels dropped, then converted."""

    def get(v: Any) -> Any:
        value = _number(v)
        return None if value is None else then(value)

    return get


def _hotspot(metric: str) -> tuple[Way, ...]:
    """One value of the hotspot (junction) sensor, by the sensor's newer name, then its older."""
    return tuple(
        by_call(_TEMP, sensor, metric, convert=_scalar(_celsius), unit="°C")
        for sensor in (_HOT, _JUNCTION)
    )


# The per-tick snapshot; ways most direct first, the probe keeps the first that has a value.
def _processes(listed: Sequence[Any]) -> tuple[ComputeProcess, ...]:
    """amdsmi_get_gpu_process_list's entries: pid, name and VRAM (bytes; "N/A" is None)."""
    out = []
    for p in listed:
        usage = p.get("memory_usage") if isinstance(p.get("memory_usage"), Mapping) else {}
        vram = usage.get("vram_mem", p.get("mem"))
        used = vram / 2**20 if isinstance(vram, int | float) and vram >= 0 else None
        name = p.get("name") if isinstance(p.get("name"), str) and p["name"] != "N/A" else None
        out.append(ComputeProcess(int(p["pid"]), name, used))
    return tuple(out)


_PROCESSES = by_call("amdsmi_get_gpu_process_list", convert=_processes, unit="processes, B → MiB")

METRICS: tuple[Metric, ...] = (
    Metric(
        "temp_c",
        (
            *_hotspot(_NOW),
            by_call(_METRICS_INFO, convert=_key("temperature_hotspot", then=_celsius), unit="°C"),
        ),
        temp_ok,
    ),
    Metric(
        "mem_temp_c",
        (
            by_call(_TEMP, _VRAM, _NOW, convert=_scalar(_celsius), unit="°C"),
            by_call(_METRICS_INFO, convert=_key("temperature_mem", then=_celsius), unit="°C"),
        ),
        temp_ok,
    ),
    Metric(
        "sm_clock_mhz",
        (
            by_call(_CLOCK, "AmdSmiClkType.GFX", convert=_key("clk", "cur_clk"), unit="MHz"),
            by_call(_METRICS_INFO, convert=_key("current_gfxclk", "average_gfxclk_frequency")),
        ),
        positive,
    ),
    Metric(
        "mem_clock_mhz",
        (
            by_call(_CLOCK, "AmdSmiClkType.MEM", convert=_key("clk", "cur_clk"), unit="MHz"),
            by_call(_METRICS_INFO, convert=_key("current_uclk", "average_uclk_frequency")),
        ),
        positive,
    ),
    Metric(
        "power_w",
        (
            by_call(
                "amdsmi_get_power_info",
                convert=_key("socket_power", "current_socket_power", "average_socket_power"),
                unit="W",
            ),
            by_call(_METRICS_INFO, convert=_key("current_socket_power", "average_socket_power")),
        ),
    ),
    Metric(
        "power_limit_w",
        (
            by_call(
                "amdsmi_get_power_cap_info", convert=_key("power_cap", then=_micro_w), unit="µW → W"
            ),
            by_call("amdsmi_get_power_info", convert=_key("power_limit"), unit="W"),
        ),
        positive,
    ),
    Metric(
        "energy_j",
        (by_call("amdsmi_get_energy_count", convert=_energy_j, unit="count × µJ → J"),),
    ),
    Metric(
        "util_pct",
        (
            by_call("amdsmi_get_gpu_activity", convert=_key("gfx_activity"), unit="%"),
            by_call(_METRICS_INFO, convert=_key("average_gfx_activity"), unit="%"),
        ),
        pct,
    ),
    Metric(
        "mem_util_pct",
        (
            by_call("amdsmi_get_gpu_activity", convert=_key("umc_activity"), unit="%"),
            by_call(_METRICS_INFO, convert=_key("average_umc_activity"), unit="%"),
        ),
        pct,
    ),
    Metric("fan_pct", (by_call("amdsmi_get_gpu_fan_speed", "0", convert=_fan_pct, unit="/255"),)),
    Metric(
        "clock_reasons",
        (
            by_call(_VIOLATION, convert=_violation_reasons, unit="active flags → bits"),
            by_call(_METRICS_INFO, convert=_throttle_reasons, unit="indep_throttle_status → bits"),
        ),
        raw=True,  # (mapped bits, unmapped bits): see AmdBackend._reasons
    ),
    Metric(
        "power_violation_s",
        (by_call(_VIOLATION, convert=_counter_pair("acc_ppt_pwr"), unit="PVIOL counts → s"),),
        raw=True,  # (samples, samples in violation): see _ViolationTime
    ),
    Metric(
        "thermal_violation_s",
        (by_call(_VIOLATION, convert=_counter_pair("acc_socket_thrm"), unit="TVIOL counts → s"),),
        raw=True,
    ),
    Metric(
        "ecc_corrected",
        (by_call("amdsmi_get_gpu_total_ecc_count", convert=_key("correctable_count")),),
        integer=True,
    ),
    Metric(
        "ecc_uncorrected",
        (by_call("amdsmi_get_gpu_total_ecc_count", convert=_key("uncorrectable_count")),),
        integer=True,
    ),
    Metric(
        "remap_pending", (by_call(_BAD_PAGES, convert=_pages("PENDING", flag=True)),), integer=True
    ),
    Metric(
        "remap_failure",
        (by_call(_BAD_PAGES, convert=_pages("UNRESERVABLE", flag=True)),),
        integer=True,
    ),
    Metric("retired_pages", (by_call(_BAD_PAGES, convert=_pages("RESERVED")),), integer=True),
    Metric(
        "pcie_replay",
        (
            by_call("amdsmi_get_gpu_pci_replay_counter", convert=_scalar()),
            by_call("amdsmi_get_pcie_info", convert=_path("pcie_metric", "pcie_replay_count")),
        ),
        integer=True,
    ),
    # amdsmi gives no share of the device that others use; it lists their processes (raw):
    # VendorBackend leaves soak's own out
    Metric("foreign_load_pct", ()),
    Metric("foreign_procs", (_PROCESSES,), raw=True),
    Metric("foreign_mem_mib", (_PROCESSES,), raw=True),
)

# Metrics whose table value is raw material for a per-device state (see `_Device`).
_DERIVED = {"power_violation_s", "thermal_violation_s"}

# What a device is, read once at start.
INVENTORY: tuple[Metric, ...] = (
    Metric(
        "name",
        (
            by_call("amdsmi_get_gpu_asic_info", convert=_text_key("market_name")),
            by_call("amdsmi_get_gpu_board_info", convert=_text_key("product_name")),
        ),
    ),
    Metric(
        "serial",
        (
            by_call("amdsmi_get_gpu_asic_info", convert=_text_key("asic_serial")),
            by_call("amdsmi_get_gpu_board_info", convert=_text_key("product_serial")),
        ),
    ),
    Metric("uuid", (by_call("amdsmi_get_gpu_device_uuid", convert=_text),)),
    Metric("pci_bus_id", (by_call("amdsmi_get_gpu_device_bdf", convert=_text),)),
    Metric(
        "vbios",
        (
            by_call(
                "amdsmi_get_gpu_vbios_info",
                convert=_text_key("version", "vbios_version_string", "vbios_version"),
            ),
        ),
    ),
    Metric(
        "driver_version",
        (by_call("amdsmi_get_gpu_driver_info", convert=_text_key("driver_version")),),
    ),
    Metric(
        "memory_total_b",
        (
            by_call("amdsmi_get_gpu_vram_info", convert=_key("vram_size", then=_mib), unit="MiB"),
            by_call("amdsmi_get_gpu_vram_usage", convert=_key("vram_total", then=_mib), unit="MiB"),
        ),
        positive,
        integer=True,
    ),
    Metric(
        "power_limit_w",
        (by_call("amdsmi_get_power_cap_info", convert=_key("power_cap", then=_micro_w)),),
        positive,
    ),
    Metric(
        "default_power_limit_w",
        (by_call("amdsmi_get_power_cap_info", convert=_key("default_power_cap", then=_micro_w)),),
        positive,
    ),
    Metric(
        "max_sm_clock_mhz",
        (by_call(_CLOCK, "AmdSmiClkType.GFX", convert=_key("max_clk")),),
        positive,
    ),
    Metric(
        "max_mem_clock_mhz",
        (by_call(_CLOCK, "AmdSmiClkType.MEM", convert=_key("max_clk")),),
        positive,
    ),
    Metric("slowdown_temp_c", _hotspot("AmdSmiTemperatureMetric.CRITICAL"), temp_ok),
    Metric("shutdown_temp_c", _hotspot("AmdSmiTemperatureMetric.EMERGENCY"), temp_ok),
    Metric(
        "mem_max_temp_c",
        (by_call(_TEMP, _VRAM, "AmdSmiTemperatureMetric.CRITICAL", convert=_scalar(_celsius)),),
        temp_ok,
    ),
    Metric(
        "hip_uuid", (by_call("amdsmi_get_gpu_enumeration_info", convert=_text_key("hip_uuid")),)
    ),
    Metric(
        "hip_id",
        (by_call("amdsmi_get_gpu_enumeration_info", convert=_key("hip_id")),),
        integer=True,
    ),
)
_EXTRA = ("hip_uuid", "hip_id")


# --------------------------------------------------------------------------------------------
# Per-device state


@dataclass(slots=True)
class _EnergyGuard:
    """The energy counter, checked against integrated power; replaced by it if they disagree.

    Every ``window_s`` (with at least ``min_j`` integrated), the counter's increase is compared
    with the integral's; beyond ``tolerance`` the integral takes over for good, continuing
    from the counter value at the start of the failed window (the last one trusted).
    """

    window_s: float = 30.0
    min_j: float = 100.0
    tolerance: float = 0.2
    integral: EnergyIntegrator = field(default_factory=EnergyIntegrator)
    start: tuple[float, float, float] | None = None  # t_s, counter J, integral J
    # Integral J, energy J when the integral took over: at the start where there is no
    # counter (0, 0), or when the counter failed its check; None while the counter is trusted.
    base: tuple[float, float] | None = None

    @property
    def counter_ok(self) -> bool:
        return self.base is None

    def add(self, t_s: float, counter_j: float | None, power_w: float | None) -> float | None:
        integral_j = self.integral.add(t_s, power_w)
        if self.base is not None:
            return None if integral_j is None else self.base[1] + (integral_j - self.base[0])
        if counter_j is None or integral_j is None:
            return counter_j
        if self.start is None:
            self.start = (t_s, counter_j, integral_j)
            return counter_j
        t0, c0, i0 = self.start
        if t_s - t0 >= self.window_s and integral_j - i0 >= self.min_j:
            dc, di = counter_j - c0, integral_j - i0
            if abs(dc - di) > self.tolerance * di:
                self.base = (i0, c0)
                return c0 + di
            self.start = (t_s, counter_j, integral_j)
        return counter_j


@dataclass(slots=True)
class _ViolationTime:
    """Seconds in violation from (sample counter, violation counter) pairs between ticks."""

    total_s: float = 0.0
    last: tuple[float, int, int] | None = None

    def add(self, t_s: float, pair: tuple[int, int] | None) -> float | None:
        if pair is None:
            return None
        total, hits = pair
        if self.last is not None:
            t0, total0, hits0 = self.last
            d_total, d_hits = total - total0, hits - hits0
            if t_s > t0 and d_total > 0 and 0 <= d_hits <= d_total:
                self.total_s += (t_s - t0) * d_hits / d_total
        self.last = (t_s, total, hits)
        return self.total_s


@dataclass(slots=True, eq=False)
class _Device(Device):
    """One AMD GPU and what the probe decided for it (``energy``: its `_EnergyGuard`)."""

    violation: dict[str, _ViolationTime] = field(default_factory=dict)
    unmapped_seen: int = 0


# --------------------------------------------------------------------------------------------
# The backend


class AmdBackend(VendorBackend):
    """AMD GPUs through amdsmi: inventory, capability probe, per-tick snapshots.

    ``devices`` selects by soak index, which is amdsmi's processor-handle order.
    """

    name = "amd"
    METRICS = METRICS
    SUSPECT = _Suspect  # an I/O-like error: a lost GPU or a missing sensor file
    ALIVE = Call("amdsmi_get_gpu_activity")
    SHUTDOWN = "amdsmi_shut_down"

    def __init__(self, devices: Sequence[int] | None = None) -> None:
        if amdsmi is None:
            raise BackendUnavailable(_IMPORT_PROBLEM)
        super().__init__(AmdQuery())
        self._init()
        try:
            self._start(devices)
        except BaseException:
            self.close()
            raise

    # -- start ----------------------------------------------------------------------------------

    def _init(self) -> None:
        """Start amdsmi for GPUs; any failure means the backend cannot run here."""
        flags = []
        for path in ("AmdSmiInitFlags.INIT_AMD_GPUS", "AmdSmiInitFlags.AMD_GPUS"):
            try:
                flags = [self._q.constant(path)]
                break
            except FunctionMissing:
                continue
        try:
            self._q.call("amdsmi_init", *flags)
        except SoakError as exc:
            raise BackendUnavailable(
                f"amdsmi could not start ({_error_name(exc)}): amdgpu driver not loaded?"
            ) from exc
        self._open = True

    def _start(self, wanted: Sequence[int] | None) -> None:
        """List the GPUs, select the asked-for ones, probe and describe each."""
        try:
            handles = list(self._q.call("amdsmi_get_processor_handles"))
        except SoakError as exc:
            raise BackendUnavailable(f"amdsmi cannot list GPUs ({_error_name(exc)})") from exc
        if not handles:
            raise BackendUnavailable("amdsmi found no AMD GPU")
        for name in ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"):
            if name in os.environ:
                log.warning(
                    "amd: %s is set; soak selects GPUs with --devices and sets it for "
                    "each worker itself",
                    name,
                )
        for i in select(list(range(len(handles))), wanted, self.name):
            dev = _Device(index=i, handle=handles[i])
            self._devices.append(dev)
            self._info.append(self._open_device(dev))

    def _lost_info(self, dev: _Device) -> DeviceInfo:
        return DeviceInfo(
            index=dev.index,
            backend=self.name,
            name="unknown AMD GPU (lost at start)",
            torch_device=None,
            worker_env={"HIP_VISIBLE_DEVICES": "-1", "CUDA_VISIBLE_DEVICES": "-1"},
        )

    def _describe(self, dev: _Device) -> DeviceInfo:
        """The `DeviceInfo` of a probed device, with the probe's tables in ``extra``."""
        inv = {m.name: self._value(dev, m) for m in INVENTORY}
        extra: dict[str, Any] = {k: inv.pop(k) for k in _EXTRA}
        extra["amd_sources"] = {name: way.label for name, way in dev.plan.items()}
        extra["amd_calls"] = {key: cap.value for key, cap in dev.calls.items()}
        if dev.energy is not None and "energy_j" not in dev.plan:
            extra["amd_sources"]["energy_j"] = "integrated from power_w (trapezoid)"
        return DeviceInfo(
            index=dev.index,
            backend=self.name,
            name=inv.pop("name") or "unknown AMD GPU",
            torch_device="cuda:0",
            worker_env=worker_env(extra["hip_uuid"], extra["hip_id"], dev.index),
            extra=extra,
            **inv,
        )

    def _after_probe(self, dev: _Device) -> None:
        """Set up the per-device state of derived metrics (violation time, energy)."""
        for name in _DERIVED & set(dev.plan):
            dev.violation[name] = _ViolationTime()
            dev.caps[name] = Capability.FALLBACK
        if "energy_j" in dev.plan:
            dev.energy = _EnergyGuard()
        elif "power_w" in dev.plan:
            dev.energy = _EnergyGuard(base=(0.0, 0.0))  # no counter: the integral from the start
            dev.caps["energy_j"] = Capability.FALLBACK
        dev.caps["xid_events"] = Capability.NOT_SUPPORTED

    # -- reading --------------------------------------------------------------------------------

    def _derive(self, dev: _Device, t_s: float, values: dict[str, Any]) -> dict[str, Any]:
        """Violation time from its counters, mapped clock reasons, the checked energy."""
        for name, clock in dev.violation.items():
            values[name] = clock.add(t_s, values[name])
        values["clock_reasons"] = self._reasons(dev, values["clock_reasons"], t_s)
        if dev.energy is not None:
            values["energy_j"] = self._energy(dev, t_s, values["energy_j"], values["power_w"])
        return values

    def _reasons(self, dev: _Device, reasons: tuple[int, int] | None, t_s: float) -> int | None:
        """The mapped clock-reason bits; unmapped AMD bits are reported once as an event."""
        if reasons is None:
            return None
        mapped, unmapped = reasons
        new = unmapped & ~dev.unmapped_seen
        if new:
            dev.unmapped_seen |= new
            message = f"AMD throttle reason bits {new:#x} have no NVIDIA equivalent"
            details = {"indep_throttle_status_unmapped": new}
            self._event(Pending(EventKind.WARNING, message, dev.index, details, t_s))
        return mapped

    def _energy(
        self, dev: _Device, t_s: float, counter_j: float | None, power_w: float | None
    ) -> float | None:
        """Energy from the checked counter, or from integrated power once the check failed."""
        was_ok = dev.energy.counter_ok
        value = dev.energy.add(t_s, counter_j, power_w)
        if was_ok and not dev.energy.counter_ok:
            dev.caps["energy_j"] = Capability.FALLBACK
            message = "energy counter disagrees with integrated power by > 20 %; integrating power"
            log.warning("amd: device %d: %s", dev.index, message)
            details = {"metric": "energy_j", "fallback": "integrated power_w"}
            self._event(Pending(EventKind.WARNING, message, dev.index, details, t_s))
        return value

    def _error_name(self, exc: BaseException) -> str:
        return _error_name(exc)


def worker_env(hip_uuid: str | None, hip_id: int | None, index: int) -> dict[str, str]:
    """The environment that makes ``cuda:0`` this GPU in a PyTorch-on-ROCm worker."""
    if hip_uuid:
        return {
            "ROCR_VISIBLE_DEVICES": hip_uuid,
            "HIP_VISIBLE_DEVICES": "0",
            "CUDA_VISIBLE_DEVICES": "0",
        }
    hip = str(hip_id if hip_id is not None else index)
    return {"HIP_VISIBLE_DEVICES": hip, "CUDA_VISIBLE_DEVICES": hip}
