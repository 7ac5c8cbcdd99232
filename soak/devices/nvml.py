"""NVIDIA telemetry through NVML (``nvidia-ml-py``, imported as ``pynvml``).

The only module in soak that imports ``pynvml``. It keeps NVML's calls, tables and event
thread; the probe, the per-tick snapshot and lost devices are
`soak.devices.common.VendorBackend`'s, the same as AMD's (including what "supported" means).
Three rules shape it:

* Every vendor call goes through `NvmlQuery.call`, which translates NVML errors into soak's
  own exceptions through the table `_ERRORS`. "Not supported", "no permission" and "function
  missing" become ``None`` plus a `Capability`, logged once per function, never per sample.
* Each tick reads one snapshot per device from the declared table `METRICS`: for every
  `Telemetry` field, the ways to read it (newest NVML function first), each with its unit
  conversion. The probe at start picks one way per device and metric and records why the
  others were not picked; `INVENTORY` does the same for `DeviceInfo`.
* A device that stops answering (GPU is lost, XID 79) is reported once as a DEVICE_LOST event
  and then left out of `sample()`; the other devices go on.

XID timestamps: the event thread stamps each NVML event with ``time_fn()`` (monotonic by
default) when it arrives; `NvmlBackend.poll_events` converts that to the run's clock as
``t_s - (time_fn() - arrived)``, so an XID is placed when it happened, not when it was polled.
This holds because a real backend runs on the wall clock, whose rate the run clock shares.

Device order: without ``CUDA_VISIBLE_DEVICES`` soak's device index is NVML's index (what
``nvidia-smi`` shows). With it, soak follows CUDA: the listed GPUs in the listed order, integer
entries counted in PCI bus order (CUDA_DEVICE_ORDER=PCI_BUS_ID semantics; on a server of one
GPU model that is also CUDA's default FASTEST_FIRST order). Each worker is started with
``CUDA_VISIBLE_DEVICES=<its GPU UUID>`` so that ``cuda:0`` is its GPU under any ordering.
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import pynvml

from soak.devices.common import (
    CAPABILITY_OF,
    Answer,
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
    GpuLost,
    NoPermission,
    NotSupported,
    SoakError,
)
from soak.model import Capability, DeviceInfo, EventKind

log = logging.getLogger(__name__)

SUPPORTED = Capability.SUPPORTED
RAW_FORMAT = "soak-nvml-probe/1"


# --------------------------------------------------------------------------------------------
# Errors: NVML's exception classes translated into soak's, by class name (old bindings lack
# some classes, so naming them keeps this module importable everywhere).


class _ReadFailed(SoakError):
    """A read failed for a reason that says nothing about support (timeout, no data, ...)."""


class _Timeout(_ReadFailed):
    """An event wait ended without an event."""


class _Unknown(_ReadFailed):
    """NVML said 'Unknown Error': a lost GPU or a one-off; the caller checks which."""


_ERRORS: dict[str, type[SoakError]] = {
    "NVMLError_NotSupported": NotSupported,
    "NVMLError_InvalidArgument": NotSupported,  # a field id or sensor this driver does not know
    "NVMLError_NoPermission": NoPermission,
    "NVMLError_FunctionNotFound": FunctionMissing,
    "NVMLError_GpuIsLost": GpuLost,
    "NVMLError_GpuNotFound": GpuLost,
    "NVMLError_ResetRequired": GpuLost,
    "NVMLError_Unknown": _Unknown,
    "NVMLError_Timeout": _Timeout,
    "NVMLError_LibraryNotFound": BackendUnavailable,
    "NVMLError_DriverNotLoaded": BackendUnavailable,
    "NVMLError_LibRmVersionMismatch": BackendUnavailable,
    "NVMLError_Uninitialized": BackendUnavailable,
}

_UNAVAILABLE: dict[str, str] = {
    "NVMLError_LibraryNotFound": "no NVIDIA driver found (libnvidia-ml.so not loadable)",
    "NVMLError_DriverNotLoaded": "NVIDIA driver not loaded (no nvidia kernel module)",
    "NVMLError_LibRmVersionMismatch": (
        "NVML library and NVIDIA kernel module versions differ (reload the driver or reboot)"
    ),
    "NVMLError_NoPermission": "no permission to open the NVIDIA devices (/dev/nvidia*)",
}


def translate(exc: Exception, func: str, device: int | None) -> SoakError:
    """soak's exception for an NVML one raised by ``func``; the NVML error stays the cause."""
    name = type(exc).__name__
    kind = _ERRORS.get(name, _ReadFailed)
    out: SoakError
    if kind is GpuLost:
        out = GpuLost(-1 if device is None else device, f"{func}: {exc}")
    elif kind is BackendUnavailable:
        out = BackendUnavailable(_UNAVAILABLE.get(name, f"NVML: {func}: {exc}"))
    else:
        out = kind(f"{func}: {exc}")
    out.__cause__ = exc
    return out


def _error_name(exc: BaseException) -> str:
    """The vendor's name for a failure: the NVML class behind a translated error."""
    cause = exc.__cause__
    return type(cause).__name__ if cause is not None else type(exc).__name__


# --------------------------------------------------------------------------------------------
# The one door to pynvml.


class NvmlQuery(Query):
    """Calls pynvml, translates its errors, and logs each problem once (a bounded set)."""

    def __init__(self) -> None:
        super().__init__(
            LogOnce(log, "nvml"),
            "nvidia-ml-py",
            lambda: pynvml,
            lambda: pynvml.NVMLError,
            translate,
        )


# --------------------------------------------------------------------------------------------
# Declared reads: what is read, how, and in which unit.


@dataclass(frozen=True, slots=True)
class Field:
    """One entry of the batched ``nvmlDeviceGetFieldValues`` call, by its NVML_FI_* name."""

    name: str

    @property
    def key(self) -> str:
        return f"nvmlDeviceGetFieldValues({self.name})"


Read = Call | Field


def _same(v: Any) -> Any:
    return v


def _milli(v: float) -> float:
    """mW → W, mJ → J."""
    return v / 1000


def _nano(v: float) -> float:
    """ns → s."""
    return v / 1e9


def _text(v: Any) -> str | None:
    if isinstance(v, bytes):
        v = v.decode(errors="replace")
    v = str(v).strip()
    return v or None


def _attr(name: str, then: Callable[[Any], Any] = _same) -> Callable[[Any], Any]:
    """Read attribute ``name`` of a returned structure, drop its sentinel, then convert."""

    def get(v: Any) -> Any:
        inner = _clean(getattr(v, name))
        return None if inner is None else then(inner)

    get.__name__ = f"attr_{name}"
    return get


def _item(i: int) -> Callable[[Any], Any]:
    def get(v: Sequence[Any]) -> Any:
        return _clean(v[i])

    get.__name__ = f"item_{i}"
    return get


def _sum(*values: int) -> int:
    return sum(values)


def _page_count(*pages: Sequence[int]) -> int:
    return sum(len(p) for p in pages)


def _cuda_version(v: int) -> str:
    """12040 → '12.4'."""
    return f"{v // 1000}.{(v % 1000) // 10}"


def _compute_capability(v: Sequence[int]) -> str:
    return f"{v[0]}.{v[1]}"


def _fan_ok(v: float) -> bool:
    return 0 <= v <= 200  # NVML documents fan speeds above 100 % on some boards


_SENTINELS = frozenset({0xFFFF_FFFF, 0xFFFF_FFFF_FFFF_FFFF})


def _clean(v: Any) -> Any:
    """None for NVML's 'not available' sentinels and impossible numbers; structures pass."""
    return clean_number(v, _SENTINELS) if isinstance(v, int | float) else v


def by_fields(*names: str, convert: Callable[..., Any] = _same, unit: str = "") -> Way:
    return Way(tuple(Field(n) for n in names), convert, unit)


def _violation_time(policy: str, field: str) -> tuple[Way, ...]:
    """Time a policy held the clocks down: its violation counter, else the field value that
    is the same counter in ns (checked on an H200; the call is marked for removal)."""
    return (
        by_call(
            "nvmlDeviceGetViolationStatus",
            policy,
            convert=_attr("violationTime", _nano),
            unit="ns → s",
        ),
        by_fields(field, convert=_nano, unit="ns → s"),
    )


_RETIRED_PAGES = Way(
    (
        Call(
            "nvmlDeviceGetRetiredPages",
            ("NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS",),
        ),
        Call("nvmlDeviceGetRetiredPages", ("NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR",)),
    ),
    _page_count,
    "pages listed",
)


# The per-tick snapshot. Order of ways: newest first; the probe keeps the first that answers.
def _processes(listed: Sequence[Any]) -> tuple[ComputeProcess, ...]:
    """nvmlDeviceGetComputeRunningProcesses' structures: pid and used memory (bytes; None
    where NVML cannot say, as under some virtualisation)."""
    out = []
    for p in listed:
        used = _clean(getattr(p, "usedGpuMemory", None))
        out.append(ComputeProcess(int(p.pid), None, None if used is None else used / 2**20))
    return tuple(out)


_PROCESSES = by_call(
    "nvmlDeviceGetComputeRunningProcesses", convert=_processes, unit="processes, B → MiB"
)

METRICS: tuple[Metric, ...] = (
    Metric(
        "temp_c",
        (
            by_call("nvmlDeviceGetTemperatureV", "NVML_TEMPERATURE_GPU", unit="°C"),
            by_call("nvmlDeviceGetTemperature", "NVML_TEMPERATURE_GPU", unit="°C"),
        ),
        temp_ok,
    ),
    Metric("mem_temp_c", (by_fields("NVML_FI_DEV_MEMORY_TEMP", unit="°C"),), temp_ok),
    Metric("sm_clock_mhz", (by_call("nvmlDeviceGetClockInfo", "NVML_CLOCK_SM", unit="MHz"),)),
    Metric("mem_clock_mhz", (by_call("nvmlDeviceGetClockInfo", "NVML_CLOCK_MEM", unit="MHz"),)),
    Metric(
        "power_w",
        (
            # 1-s average on Ampere and newer (equal to the POWER_AVERAGE field on an H200)
            by_call("nvmlDeviceGetPowerUsage", convert=_milli, unit="mW → W"),
            by_fields("NVML_FI_DEV_POWER_AVERAGE", convert=_milli, unit="mW → W"),
            by_fields("NVML_FI_DEV_POWER_INSTANT", convert=_milli, unit="mW → W"),
        ),
    ),
    Metric(
        "power_limit_w",
        (by_call("nvmlDeviceGetEnforcedPowerLimit", convert=_milli, unit="mW → W"),),
        positive,
    ),
    Metric(
        "energy_j",
        (
            by_call("nvmlDeviceGetTotalEnergyConsumption", convert=_milli, unit="mJ → J"),
            by_fields("NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION", convert=_milli, unit="mJ → J"),
        ),
    ),
    Metric(
        "util_pct",
        (by_call("nvmlDeviceGetUtilizationRates", convert=_attr("gpu"), unit="%"),),
        pct,
    ),
    Metric(
        "mem_util_pct",
        (by_call("nvmlDeviceGetUtilizationRates", convert=_attr("memory"), unit="%"),),
        pct,
    ),
    Metric("fan_pct", (by_call("nvmlDeviceGetFanSpeed", unit="%"),), _fan_ok),
    Metric(
        "clock_reasons",
        (
            by_call("nvmlDeviceGetCurrentClocksEventReasons", unit="bits"),
            by_call("nvmlDeviceGetCurrentClocksThrottleReasons", unit="bits"),
        ),
        integer=True,
    ),
    Metric(
        "power_violation_s",
        _violation_time("NVML_PERF_POLICY_POWER", "NVML_FI_DEV_PERF_POLICY_POWER"),
    ),
    Metric(
        "thermal_violation_s",
        _violation_time("NVML_PERF_POLICY_THERMAL", "NVML_FI_DEV_PERF_POLICY_THERMAL"),
    ),
    Metric(
        "ecc_corrected",
        (
            by_fields("NVML_FI_DEV_ECC_SBE_VOL_TOTAL", unit="count"),
            by_call(
                "nvmlDeviceGetTotalEccErrors",
                "NVML_MEMORY_ERROR_TYPE_CORRECTED",
                "NVML_VOLATILE_ECC",
                unit="count",
            ),
        ),
        integer=True,
    ),
    Metric(
        "ecc_uncorrected",
        (
            by_fields("NVML_FI_DEV_ECC_DBE_VOL_TOTAL", unit="count"),
            by_call(
                "nvmlDeviceGetTotalEccErrors",
                "NVML_MEMORY_ERROR_TYPE_UNCORRECTED",
                "NVML_VOLATILE_ECC",
                unit="count",
            ),
        ),
        integer=True,
    ),
    Metric(
        "remap_pending",
        (
            by_fields("NVML_FI_DEV_REMAPPED_PENDING", unit="0/1"),
            by_call("nvmlDeviceGetRemappedRows", convert=_item(2), unit="0/1"),
        ),
        integer=True,
    ),
    Metric(
        "remap_failure",
        (
            by_fields("NVML_FI_DEV_REMAPPED_FAILURE", unit="0/1"),
            by_call("nvmlDeviceGetRemappedRows", convert=_item(3), unit="0/1"),
        ),
        integer=True,
    ),
    Metric(
        "retired_pages",
        (
            by_fields(
                "NVML_FI_DEV_RETIRED_SBE", "NVML_FI_DEV_RETIRED_DBE", convert=_sum, unit="count"
            ),
            _RETIRED_PAGES,
        ),
        integer=True,
    ),
    Metric(
        "pcie_replay",
        (
            by_fields("NVML_FI_DEV_PCIE_REPLAY_COUNTER", unit="count"),
            by_call("nvmlDeviceGetPcieReplayCounter", unit="count"),
        ),
        integer=True,
    ),
    # NVML gives no share of the device that others use; it lists their processes (raw):
    # VendorBackend leaves soak's own out
    Metric("foreign_load_pct", ()),
    Metric("foreign_procs", (_PROCESSES,), raw=True),
    Metric("foreign_mem_mib", (_PROCESSES,), raw=True),
)

_MEMORY_V2 = Call("nvmlDeviceGetMemoryInfo", kwargs=(("version", "nvmlMemory_v2"),))


def _threshold(name: str) -> Way:
    return by_call("nvmlDeviceGetTemperatureThreshold", name, unit="°C")


# What a device is, read once at start into `DeviceInfo` (uuid and PCI id at discovery).
INVENTORY: tuple[Metric, ...] = (
    Metric("name", (by_call("nvmlDeviceGetName", convert=_text),)),
    Metric("serial", (by_call("nvmlDeviceGetSerial", convert=_text),)),
    Metric("vbios", (by_call("nvmlDeviceGetVbiosVersion", convert=_text),)),
    Metric(
        "memory_total_b",
        (
            Way((_MEMORY_V2,), _attr("total"), "B"),
            by_call("nvmlDeviceGetMemoryInfo", convert=_attr("total"), unit="B"),
        ),
        positive,
        integer=True,
    ),
    Metric(
        "power_limit_w",
        (by_call("nvmlDeviceGetEnforcedPowerLimit", convert=_milli, unit="mW → W"),),
        positive,
    ),
    Metric(
        "default_power_limit_w",
        (by_call("nvmlDeviceGetPowerManagementDefaultLimit", convert=_milli, unit="mW → W"),),
        positive,
    ),
    Metric(
        "max_sm_clock_mhz",
        (by_call("nvmlDeviceGetMaxClockInfo", "NVML_CLOCK_SM", unit="MHz"),),
        positive,
    ),
    Metric(
        "max_mem_clock_mhz",
        (by_call("nvmlDeviceGetMaxClockInfo", "NVML_CLOCK_MEM", unit="MHz"),),
        positive,
    ),
    Metric("shutdown_temp_c", (_threshold("NVML_TEMPERATURE_THRESHOLD_SHUTDOWN"),), temp_ok),
    Metric("slowdown_temp_c", (_threshold("NVML_TEMPERATURE_THRESHOLD_SLOWDOWN"),), temp_ok),
    Metric("max_operating_temp_c", (_threshold("NVML_TEMPERATURE_THRESHOLD_GPU_MAX"),), temp_ok),
    Metric("mem_max_temp_c", (_threshold("NVML_TEMPERATURE_THRESHOLD_MEM_MAX"),), temp_ok),
    Metric(
        "compute_capability",
        (by_call("nvmlDeviceGetCudaComputeCapability", convert=_compute_capability),),
    ),
)

SYSTEM: tuple[Metric, ...] = (
    Metric("driver_version", (by_call("nvmlSystemGetDriverVersion", convert=_text),)),
    Metric(
        "cuda_version",
        (
            by_call("nvmlSystemGetCudaDriverVersion_v2", convert=_cuda_version),
            by_call("nvmlSystemGetCudaDriverVersion", convert=_cuda_version),
        ),
    ),
    Metric("nvml_version", (by_call("nvmlSystemGetNVMLVersion", convert=_text),)),
)

_UUID_METRIC = Metric("uuid", (by_call("nvmlDeviceGetUUID", convert=_text),))
_PCI_METRIC = Metric(
    "pci_bus_id", (by_call("nvmlDeviceGetPciInfo", convert=_attr("busId", _text)),)
)
_MIG = Call("nvmlDeviceGetMigMode")
_EVENT_TYPES = Call("nvmlDeviceGetSupportedEventTypes")

# nvmlFieldValue_t.valueType → the member of its value union (NVML_VALUE_TYPE_* 0..6).
_VALUE_MEMBER = {
    0: "dVal",
    1: "uiVal",
    2: "ulVal",
    3: "ullVal",
    4: "sllVal",
    5: "siVal",
    6: "usVal",
}

# XIDs worth a name in the report; see NVIDIA's XID catalogue. 79 means the GPU is gone.
_XID_NAMES = {
    13: "graphics engine exception",
    31: "GPU memory page fault",
    43: "GPU stopped processing",
    48: "double-bit ECC error",
    63: "ECC page retirement or row remapping event",
    64: "ECC page retirement or row remapping failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
}
LOST_XIDS = frozenset({79})


# --------------------------------------------------------------------------------------------
# Answers and per-device state.


def _raw(answer: Answer) -> Any:
    """An answer in JSON-able form for `probe_raw`; `tests/devices/fake_pynvml.py` replays it."""
    if answer.error is not None:
        return {"error": answer.error}
    if answer.value_type is not None:
        return {"type": answer.value_type, "value": answer.value}
    return _jsonable(answer.value)


def _jsonable(v: Any) -> Any:
    """A returned value as JSON: ctypes structures and arrays become dicts and lists."""
    if v is None or isinstance(v, bool | int | float | str):
        return v
    if isinstance(v, bytes):
        return v.decode(errors="replace")
    if isinstance(v, list | tuple):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, ctypes.Structure):
        return {name: _jsonable(getattr(v, name)) for name, *_ in v._fields_}
    if isinstance(v, ctypes.Array):
        return [_jsonable(x) for x in v]
    if hasattr(v, "__dict__"):
        return {k: _jsonable(x) for k, x in vars(v).items() if not k.startswith("_")}
    return repr(v)


@dataclass(slots=True, eq=False)
class _Device(Device):
    """One NVML device as found at discovery, and what the probe decided for it."""

    nvml_index: int = -1
    uuid: str | None = None
    pci_bus_id: str | None = None
    raw: dict[str, Any] | None = None  # every answer, when recording for probe_raw


def _handle_key(handle: Any) -> int:
    """A key equal for two handles of one device: its address, or the object for fakes."""
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value or id(handle)
    except (TypeError, ctypes.ArgumentError):
        return id(handle)


# --------------------------------------------------------------------------------------------
# The backend.


class NvmlBackend(VendorBackend):
    """NVIDIA GPUs through NVML: inventory, capability probe, per-tick snapshots, XIDs.

    ``devices`` selects by soak index (see the module docstring for the order). ``time_fn``
    stamps events from the event thread (see the module docstring); ``event_wait_ms`` bounds
    how long `close` waits for that thread. ``record_raw`` keeps every NVML answer of the probe
    for `raw_answers` (used by `probe_raw`).
    """

    name = "nvml"
    METRICS = METRICS
    SUSPECT = _Unknown  # NVML's 'Unknown Error'
    ALIVE = Call("nvmlDeviceGetClockInfo", ("NVML_CLOCK_SM",))
    SHUTDOWN = "nvmlShutdown"

    def __init__(
        self,
        devices: Sequence[int] | None = None,
        *,
        time_fn: Callable[[], float] = time.monotonic,
        event_wait_ms: int = 500,
        watch_events: bool = True,
        record_raw: bool = False,
    ) -> None:
        super().__init__(NvmlQuery(), time_fn)
        self._system: dict[str, Any] = {}
        self._system_raw: dict[str, Any] | None = {} if record_raw else None
        self._watcher: _EventWatcher | None = None
        self._init()
        try:
            self._start(devices, record_raw)
            if watch_events:
                self._watch(event_wait_ms)
            else:
                for dev in self._devices:
                    if not dev.lost:
                        dev.caps["xid_events"] = Capability.NOT_SUPPORTED
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Stop the event thread and shut NVML down; safe to call twice."""
        if self._watcher is not None:
            self._watcher.stop()
            self._watcher = None
        super().close()

    def raw_answers(self) -> dict[str, Any]:
        """Every NVML answer of the probe, JSON-able (needs ``record_raw=True``)."""
        return {
            "format": RAW_FORMAT,
            "nvidia_ml_py": _binding_version(),
            "system": dict(self._system_raw or {}),
            "devices": [dict(dev.raw or {}) for dev in self._devices],
        }

    # -- start ----------------------------------------------------------------------------------

    def _init(self) -> None:
        try:
            self._q.call("nvmlInit")
        except BackendUnavailable:
            raise
        except SoakError as exc:
            raise BackendUnavailable(
                _UNAVAILABLE.get(_error_name(exc), f"NVML could not start: {exc}")
            ) from exc
        self._open = True

    def _start(self, wanted: Sequence[int] | None, record: bool) -> None:
        """Inventory, device order, selection, MIG check and the probe of each chosen device."""
        self._system = {m.name: self._value(None, m) for m in SYSTEM}
        found = self._discover(record)
        visible = _visible(found, os.environ.get("CUDA_VISIBLE_DEVICES"), self._q)
        for position, dev in enumerate(visible):
            dev.index = position if "CUDA_VISIBLE_DEVICES" in os.environ else dev.nvml_index
        chosen = _choose(visible, wanted)
        for dev in chosen:
            self._check_mig(dev)
        for dev in chosen:
            self._devices.append(dev)
            self._info.append(self._open_device(dev))

    def _discover(self, record: bool) -> list[_Device]:
        """Every GPU NVML counts, with its handle, UUID and PCI id (or why it cannot be opened)."""
        count_call = Call("nvmlDeviceGetCount")
        answer = self._read(None, [count_call], probing=True)[count_call]
        if answer.error is not None:
            raise BackendUnavailable(f"NVML cannot count the GPUs ({answer.error})")
        count = _clean(answer.value)
        if not count:
            raise BackendUnavailable("NVML found no NVIDIA GPU")
        found = []
        for i in range(int(count)):
            dev = _Device(nvml_index=i, index=i, raw={} if record else None)
            try:
                dev.handle = self._q.call("nvmlDeviceGetHandleByIndex", i, device=i)
                dev.uuid = self._value(dev, _UUID_METRIC)
                dev.pci_bus_id = self._value(dev, _PCI_METRIC)
            except (GpuLost, _Unknown) as exc:
                dev.lost = str(exc)
                log.error("nvml: GPU %d cannot be opened (%s); it is reported lost", i, exc)
            found.append(dev)
        return found

    def _check_mig(self, dev: _Device) -> None:
        """Refuse a GPU in MIG mode: a worker could not load it whole."""
        if dev.lost:
            return
        try:
            current, _pending = self._q.call(_MIG.func, dev.handle, device=dev.index)
        except SoakError:
            return  # no MIG on this GPU or this driver
        if current == 1:
            raise BackendUnavailable(
                f"GPU {dev.nvml_index} ({dev.uuid}) is in MIG mode, which soak does not support: "
                f"it loads whole GPUs (disable with: nvidia-smi -i {dev.nvml_index} -mig 0)"
            )

    def _lost_info(self, dev: _Device) -> DeviceInfo:
        return DeviceInfo(
            index=dev.index,
            backend=self.name,
            name="unknown NVIDIA GPU (lost at start)",
            driver_version=self._system["driver_version"],
            cuda_version=self._system["cuda_version"],
            torch_device=None,
            worker_env={"CUDA_VISIBLE_DEVICES": ""},
            extra={"nvml_index": dev.nvml_index, "lost": dev.lost},
        )

    def _describe(self, dev: _Device) -> DeviceInfo:
        """The `DeviceInfo` of a probed device, with the probe's tables in ``extra``."""
        inv = {m.name: self._value(dev, m) for m in INVENTORY}
        extra = {
            "nvml_index": dev.nvml_index,
            "compute_capability": inv.pop("compute_capability"),
            "nvml_version": self._system["nvml_version"],
            "nvml_sources": {name: way.label for name, way in dev.plan.items()},
            "nvml_calls": {key: cap.value for key, cap in dev.calls.items()},
        }
        if dev.energy is not None:
            extra["nvml_sources"]["energy_j"] = "integrated from power_w (trapezoid)"
        return DeviceInfo(
            index=dev.index,
            backend=self.name,
            name=inv.pop("name") or "unknown NVIDIA GPU",
            uuid=dev.uuid,
            pci_bus_id=dev.pci_bus_id,
            driver_version=self._system["driver_version"],
            cuda_version=self._system["cuda_version"],
            torch_device="cuda:0",
            worker_env=worker_env(dev.uuid),
            extra=extra,
            **inv,
        )

    def _after_probe(self, dev: _Device) -> None:
        """No energy counter: integrate power (the named fallback)."""
        if "energy_j" not in dev.plan and "power_w" in dev.plan:
            dev.energy = EnergyIntegrator()
            dev.caps["energy_j"] = Capability.FALLBACK
            self._q.log_once(
                "energy_j",
                "fallback",
                f"nvml: no energy counter on device {dev.index}; integrating power_w instead",
            )

    def _watch(self, wait_ms: int) -> None:
        self._watcher = _EventWatcher(
            self._q, self._devices, wait_ms, self._on_event, self._time_fn
        )
        caps = self._watcher.start()
        for dev in self._devices:
            if dev.index in caps:
                dev.caps["xid_events"] = caps[dev.index]

    # -- reading --------------------------------------------------------------------------------

    def _derive(self, dev: _Device, t_s: float, values: dict[str, Any]) -> dict[str, Any]:
        if dev.energy is not None:
            values["energy_j"] = dev.energy.add(t_s, values["power_w"])
        return values

    def _clean(self, value: Any) -> Any:
        return _clean(value)

    def _process_name(self, pid: int) -> str | None:
        try:
            return _text(self._q.call("nvmlSystemGetProcessName", pid))
        except SoakError:
            return None

    def _error_name(self, exc: BaseException) -> str:
        return _error_name(exc)

    def _read(
        self, dev: _Device | None, reads: Iterable[Read], *, probing: bool = False
    ) -> dict[Read, Answer]:
        """Answer each read once: field values in one batched call, the rest one by one. The
        probe's answers are recorded for `probe_raw` when asked."""
        unique = list(dict.fromkeys(reads))
        answers = self._read_fields(dev, [r for r in unique if isinstance(r, Field)], probing)
        answers |= super()._read(dev, [r for r in unique if isinstance(r, Call)], probing=probing)
        record = self._system_raw if dev is None else dev.raw
        if probing and record is not None:
            record.update({r.key: _raw(answers[r]) for r in unique})
        return answers

    def _read_fields(
        self, dev: _Device | None, wanted: list[Field], probing: bool
    ) -> dict[Read, Answer]:
        """The field values among the reads, in one nvmlDeviceGetFieldValues call."""
        answers: dict[Read, Answer] = {}
        if not wanted or dev is None:
            return answers
        ids, known = [], []
        for f in wanted:
            try:
                ids.append(self._q.constant(f.name))
                known.append(f)
            except FunctionMissing as exc:
                answers[f] = self._problem(dev, f.key, exc, probing)
        if not known:
            return answers
        try:
            entries = self._q.call("nvmlDeviceGetFieldValues", dev.handle, ids, device=dev.index)
        except GpuLost:
            raise
        except SoakError as exc:
            failed = self._problem(dev, "nvmlDeviceGetFieldValues", exc, probing)
            return answers | dict.fromkeys(known, failed)
        for f, entry in zip(known, entries, strict=True):
            answers[f] = self._field_answer(dev, f, entry, probing)
        return answers

    def _field_answer(self, dev: _Device, f: Field, entry: Any, probing: bool) -> Answer:
        """One field value, its own nvmlReturn checked: only that metric fails."""
        if entry.nvmlReturn != 0:
            exc = translate(pynvml.NVMLError(entry.nvmlReturn), f.key, dev.index)
            if isinstance(exc, GpuLost):
                raise exc
            return self._problem(dev, f.key, exc, probing)
        member = _VALUE_MEMBER.get(entry.valueType)
        if member is None:
            problem = _ReadFailed(f"{f.key}: value type {entry.valueType}")
            return self._problem(dev, f.key, problem, probing)
        return Answer(getattr(entry.value, member), value_type=entry.valueType)

    # -- events ---------------------------------------------------------------------------------

    def _on_event(self, index: int | None, kind: str, data: int, arrived: float) -> None:
        """Called by the event thread for each NVML event."""
        if kind == "xid":
            name = _XID_NAMES.get(data)
            message = f"XID {data}" + (f" ({name})" if name else "")
            pending = Pending(EventKind.XID, message, index, {"code": data}, arrived=arrived)
        else:
            pending = Pending(
                EventKind.ECC,
                "double-bit ECC error",
                index,
                {"event": "double_bit_ecc"},
                arrived=arrived,
            )
        self._event(pending)
        log.warning("nvml: device %s: %s", index, pending.message)
        if kind == "xid" and data in LOST_XIDS and index is not None:
            self._mark_lost(index, pending.message, arrived=arrived)


def worker_env(uuid: str | None) -> dict[str, str]:
    """The environment that makes ``cuda:0`` this GPU in the worker under any ordering."""
    if uuid is None:
        return {"CUDA_VISIBLE_DEVICES": ""}
    return {"CUDA_VISIBLE_DEVICES": uuid, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def _choose(visible: list[_Device], wanted: Sequence[int] | None) -> list[_Device]:
    """The devices asked for with ``--devices`` (soak indices)."""
    by_index = {dev.index: dev for dev in visible}
    return [by_index[i] for i in select(list(by_index), wanted, "nvml")]


def _visible(found: list[_Device], cvd: str | None, q: NvmlQuery) -> list[_Device]:
    """The devices CUDA would show, in CUDA's order, following ``CUDA_VISIBLE_DEVICES``.

    Entries are GPU UUIDs (or unique prefixes) or integer indices counted in PCI bus order;
    like CUDA, the list ends at the first entry that names no device. MIG entries are refused.
    """
    if cvd is None:
        return found
    by_pci = sorted((d for d in found if not d.lost), key=lambda d: (d.pci_bus_id or "").lower())
    out: list[_Device] = []
    for entry in (e.strip() for e in cvd.split(",")):
        if entry.upper().startswith("MIG-"):
            raise BackendUnavailable(
                f"CUDA_VISIBLE_DEVICES names MIG instance {entry}: MIG is not supported, "
                "soak loads whole GPUs"
            )
        dev = _lookup(entry, by_pci)
        if dev is None or dev in out:
            if entry:
                log.warning(
                    "nvml: CUDA_VISIBLE_DEVICES entry %r names no new GPU; "
                    "the list ends there, as in CUDA",
                    entry,
                )
            break
        out.append(dev)
    if not out:
        raise BackendUnavailable(f"CUDA_VISIBLE_DEVICES={cvd!r} leaves no NVIDIA GPU visible")
    if any(e.strip().isdigit() for e in cvd.split(",")):
        _warn_order(by_pci, q)
    return out


def _lookup(entry: str, by_pci: list[_Device]) -> _Device | None:
    """The device a CUDA_VISIBLE_DEVICES entry names: an index in PCI order or a UUID prefix."""
    if entry.isdigit():
        i = int(entry)
        return by_pci[i] if i < len(by_pci) else None
    if entry.upper().startswith("GPU-"):
        matches = [d for d in by_pci if (d.uuid or "").lower().startswith(entry.lower())]
        return matches[0] if len(matches) == 1 else None
    return None


def _warn_order(by_pci: list[_Device], q: NvmlQuery) -> None:
    """Warn once where integer entries may not mean what CUDA will make of them."""
    if os.environ.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID":
        return
    q.log_once(
        "CUDA_VISIBLE_DEVICES",
        "order",
        "nvml: CUDA_VISIBLE_DEVICES uses indices and CUDA_DEVICE_ORDER is not PCI_BUS_ID; soak "
        "reads them in PCI bus order, which equals CUDA's order only on servers of one GPU "
        "model. Use GPU UUIDs or set CUDA_DEVICE_ORDER=PCI_BUS_ID to be sure.",
        logging.WARNING,
    )


# --------------------------------------------------------------------------------------------
# The event thread.


class _EventWatcher:
    """A daemon thread that waits on an NVML event set and reports XIDs and double-bit ECC.

    Registration that fails on a device makes its ``xid_events`` capability not supported
    (or no permission, or missing), never a crash. `stop` ends the thread within one wait.
    """

    WANTED: ClassVar[dict[str, str]] = {
        "nvmlEventTypeXidCriticalError": "xid",
        "nvmlEventTypeDoubleBitEccError": "ecc",
    }

    def __init__(
        self,
        q: NvmlQuery,
        devices: list[_Device],
        wait_ms: int,
        on_event: Callable[[int | None, str, int, float], None],
        time_fn: Callable[[], float],
    ) -> None:
        self._q = q
        self._devices = [d for d in devices if not d.lost]
        self._wait_ms = wait_ms
        self._on_event = on_event
        self._time_fn = time_fn
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._set: Any = None
        self._wait = "nvmlEventSetWait_v2"
        self._index_of: dict[int, int] = {}
        self._types: dict[int, str] = {}

    def start(self) -> dict[int, Capability]:
        """Register every device; start the thread if any registered. Capability per device."""
        caps = {d.index: Capability.NOT_SUPPORTED for d in self._devices}
        for name, kind in self.WANTED.items():
            try:
                self._types[self._q.constant(name)] = kind
            except FunctionMissing:
                continue
        try:
            self._set = self._q.call("nvmlEventSetCreate")
        except SoakError as exc:
            cap = CAPABILITY_OF.get(type(exc), Capability.NOT_SUPPORTED)
            self._q.log_once(
                "nvmlEventSetCreate",
                cap.value,
                f"nvml: no XID events: nvmlEventSetCreate {cap.value} ({exc})",
            )
            return dict.fromkeys(caps, cap)
        for dev in self._devices:
            caps[dev.index] = self._register(dev)
        if not self._index_of or not self._pick_wait():
            self._free()
            return {i: c if c is not SUPPORTED else Capability.MISSING for i, c in caps.items()}
        self._thread = threading.Thread(target=self._run, name="soak-nvml-events", daemon=True)
        self._thread.start()
        return caps

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self._wait_ms / 1000 + 2.0)
            if self._thread.is_alive():
                log.warning("nvml: event thread did not stop; leaving the event set allocated")
                return
            self._thread = None
        self._free()

    def _register(self, dev: _Device) -> Capability:
        """Register a device's XID (and double-bit ECC) events; its ``xid_events`` capability."""
        mask = sum(self._types)
        supported = self._read_supported(dev)
        if supported is not None:
            mask &= supported
        xid = next((t for t, kind in self._types.items() if kind == "xid"), 0)
        if not mask & xid:
            self._q.log_once(
                "xid_events", "not supported", f"nvml: device {dev.index} reports no XID events"
            )
            return Capability.NOT_SUPPORTED
        try:
            self._q.call("nvmlDeviceRegisterEvents", dev.handle, mask, self._set, device=dev.index)
        except SoakError as exc:
            cap = CAPABILITY_OF.get(type(exc), Capability.NOT_SUPPORTED)
            self._q.log_once(
                "nvmlDeviceRegisterEvents",
                cap.value,
                f"nvml: no XID events on device {dev.index}: {exc}",
            )
            return cap
        self._index_of[_handle_key(dev.handle)] = dev.index
        return SUPPORTED

    def _read_supported(self, dev: _Device) -> int | None:
        try:
            return int(
                self._q.call("nvmlDeviceGetSupportedEventTypes", dev.handle, device=dev.index)
            )
        except SoakError:
            return None  # registration below tells

    def _pick_wait(self) -> bool:
        """Use nvmlEventSetWait_v2 where present, else nvmlEventSetWait (a zero-length wait)."""
        for func in ("nvmlEventSetWait_v2", "nvmlEventSetWait"):
            try:
                data = self._q.call(func, self._set, 0)
            except _Timeout:
                self._wait = func
                return True
            except FunctionMissing:
                continue
            except SoakError:
                self._wait = func
                return True
            self._wait = func
            self._dispatch(data)
            return True
        self._q.log_once("nvmlEventSetWait", "missing", "nvml: no event wait function; no XIDs")
        return False

    def _run(self) -> None:
        """Wait for events until stopped; a failed wait is logged once and retried later."""
        while not self._stop.is_set():
            try:
                data = self._q.call(self._wait, self._set, self._wait_ms)
            except _Timeout:
                continue
            except SoakError as exc:
                self._q.log_once(
                    self._wait,
                    _error_name(exc),
                    f"nvml: event wait failed ({exc}); retrying",
                    logging.WARNING,
                )
                self._stop.wait(self._wait_ms / 1000)
                continue
            self._dispatch(data)

    def _dispatch(self, data: Any) -> None:
        """Hand one NVML event to the backend, with the device it came from and its arrival time."""
        arrived = self._time_fn()
        index = self._index_of.get(_handle_key(data.device))
        for event_type, kind in self._types.items():
            if int(data.eventType) & event_type:
                self._on_event(index, kind, int(data.eventData), arrived)

    def _free(self) -> None:
        if self._set is None:
            return
        try:
            self._q.call("nvmlEventSetFree", self._set)
        except SoakError as exc:
            log.debug("nvml: nvmlEventSetFree failed: %s", exc)
        self._set = None


# --------------------------------------------------------------------------------------------
# Raw probe dump.


def _binding_version() -> str | None:
    try:
        return importlib.metadata.version("nvidia-ml-py")
    except importlib.metadata.PackageNotFoundError:
        return None


def probe_raw(devices: Sequence[int] | None = None) -> dict[str, Any]:
    """Every raw NVML answer of the start-up probe for every device, JSON-able.

    Keys are read names (``Call.key``/``Field.key``), values what NVML returned or
    ``{"error": "NVMLError_..."}``. ``tests/devices/fake_pynvml.py`` replays such a dump.
    """
    backend = NvmlBackend(devices=devices, watch_events=False, record_raw=True)
    try:
        dump = backend.raw_answers()
        for dev, raw in zip(backend._devices, dump["devices"], strict=True):
            if not dev.lost:
                raw.update(
                    {c.key: _raw(a) for c, a in backend._read(dev, [_MIG, _EVENT_TYPES]).items()}
                )
        return dump
    finally:
        backend.close()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m soak.devices.nvml [OUT.json]``: write `probe_raw` of this machine."""
    args = list(sys.argv[1:] if argv is None else argv)
    text = json.dumps(probe_raw(), indent=1, sort_keys=True)
    if args:
        with open(args[0], "w", encoding="utf-8") as f:
            f.write(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
