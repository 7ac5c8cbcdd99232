"""A fake ``pynvml`` built from per-GPU answer tables, in the format `probe_raw` writes.

Each GPU is a dict from read name (``"nvmlDeviceGetClockInfo(NVML_CLOCK_SM)"``,
``"nvmlDeviceGetFieldValues(NVML_FI_DEV_MEMORY_TEMP)"``) to the answer: a value, a structure
as a dict, or ``{"error": "NVMLError_NotSupported"}``. Constants, structures and exception
classes are the real pynvml's; every call is bound against the real function's signature, so
a call the real binding would reject fails here too. A read the table lacks fails the test
(``strict``), except when replaying a dump from a real machine (``strict=False``: then it is
"not supported", as NVML answers for things it does not know).
"""

from __future__ import annotations

import copy
import inspect
import json
import queue
import threading
import types
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import pynvml as real

FIXTURES = Path(__file__).parent / "fixtures"


def err(name: str) -> dict[str, str]:
    """The answer 'this read fails with NVMLError_<name>'."""
    return {"error": f"NVMLError_{name}"}


def fv(value: float, value_type: int | None = None) -> dict[str, Any]:
    """A field value answer; the NVML value type follows the Python type unless given."""
    if value_type is None:
        value_type = real.NVML_VALUE_TYPE_DOUBLE if isinstance(value, float) else 3
    return {"type": value_type, "value": value}


MISSING_FUNCTION = {"error": "AttributeError"}  # the binding has no such function

_MEMBERS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


def baseline_gpu(index: int) -> dict[str, Any]:
    """A healthy H100-like GPU under load: every read answers, nothing is throttled."""
    fi = "nvmlDeviceGetFieldValues"
    return {
        "nvmlDeviceGetUUID()": f"GPU-{index:08x}-1111-2222-3333-444455556666",
        "nvmlDeviceGetPciInfo()": {"busId": f"00000000:{0x18 + 0x10 * index:02X}:00.0"},
        "nvmlDeviceGetName()": "NVIDIA H100 80GB HBM3",
        "nvmlDeviceGetSerial()": f"165232000{index:04d}",
        "nvmlDeviceGetVbiosVersion()": "96.00.74.00.01",
        "nvmlDeviceGetMemoryInfo(version=nvmlMemory_v2)": {"total": 85520809984},
        "nvmlDeviceGetMemoryInfo()": {"total": 85520809984},
        "nvmlDeviceGetPowerManagementDefaultLimit()": 700000,
        "nvmlDeviceGetMaxClockInfo(NVML_CLOCK_SM)": 1980,
        "nvmlDeviceGetMaxClockInfo(NVML_CLOCK_MEM)": 2619,
        "nvmlDeviceGetTemperatureThreshold(NVML_TEMPERATURE_THRESHOLD_SHUTDOWN)": 92,
        "nvmlDeviceGetTemperatureThreshold(NVML_TEMPERATURE_THRESHOLD_SLOWDOWN)": 89,
        "nvmlDeviceGetTemperatureThreshold(NVML_TEMPERATURE_THRESHOLD_GPU_MAX)": 87,
        "nvmlDeviceGetTemperatureThreshold(NVML_TEMPERATURE_THRESHOLD_MEM_MAX)": 95,
        "nvmlDeviceGetCudaComputeCapability()": [9, 0],
        "nvmlDeviceGetMigMode()": err("NotSupported"),
        "nvmlDeviceGetSupportedEventTypes()": 0x0F,
        "nvmlDeviceGetTemperatureV(NVML_TEMPERATURE_GPU)": 61 + index,
        "nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)": 61 + index,
        f"{fi}(NVML_FI_DEV_MEMORY_TEMP)": fv(70 + index, 1),
        "nvmlDeviceGetClockInfo(NVML_CLOCK_SM)": 1980,
        "nvmlDeviceGetClockInfo(NVML_CLOCK_MEM)": 2619,
        "nvmlDeviceGetPowerUsage()": 650_000,
        f"{fi}(NVML_FI_DEV_POWER_AVERAGE)": fv(650_000, 1),
        f"{fi}(NVML_FI_DEV_POWER_INSTANT)": fv(655_000, 1),
        "nvmlDeviceGetEnforcedPowerLimit()": 700_000,
        "nvmlDeviceGetTotalEnergyConsumption()": 5_000_000_000,
        f"{fi}(NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION)": fv(5_000_000_000),
        "nvmlDeviceGetUtilizationRates()": {"gpu": 100, "memory": 45},
        "nvmlDeviceGetFanSpeed()": err("NotSupported"),
        "nvmlDeviceGetCurrentClocksEventReasons()": 0,
        "nvmlDeviceGetCurrentClocksThrottleReasons()": 0,
        "nvmlDeviceGetViolationStatus(NVML_PERF_POLICY_POWER)": {
            "referenceTime": 1_700_000_000_000_000,
            "violationTime": 2_500_000_000,
        },
        "nvmlDeviceGetViolationStatus(NVML_PERF_POLICY_THERMAL)": {
            "referenceTime": 1_700_000_000_000_000,
            "violationTime": 0,
        },
        f"{fi}(NVML_FI_DEV_PERF_POLICY_POWER)": fv(2_500_000_000),
        f"{fi}(NVML_FI_DEV_PERF_POLICY_THERMAL)": fv(0),
        f"{fi}(NVML_FI_DEV_ECC_SBE_VOL_TOTAL)": fv(0),
        f"{fi}(NVML_FI_DEV_ECC_DBE_VOL_TOTAL)": fv(0),
        "nvmlDeviceGetTotalEccErrors(NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC)": 0,
        "nvmlDeviceGetTotalEccErrors(NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC)": 0,
        f"{fi}(NVML_FI_DEV_REMAPPED_PENDING)": fv(0, 1),
        f"{fi}(NVML_FI_DEV_REMAPPED_FAILURE)": fv(0, 1),
        "nvmlDeviceGetRemappedRows()": [0, 0, 0, 0],
        f"{fi}(NVML_FI_DEV_RETIRED_SBE)": err("NotSupported"),
        f"{fi}(NVML_FI_DEV_RETIRED_DBE)": err("NotSupported"),
        "nvmlDeviceGetRetiredPages(NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)": err(
            "NotSupported"
        ),
        "nvmlDeviceGetRetiredPages(NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)": err(
            "NotSupported"
        ),
        f"{fi}(NVML_FI_DEV_PCIE_REPLAY_COUNTER)": fv(0),
        "nvmlDeviceGetPcieReplayCounter()": 0,
        "nvmlDeviceGetComputeRunningProcesses()": [],
    }


BASELINE_SYSTEM: dict[str, Any] = {
    "nvmlSystemGetDriverVersion()": "550.54.15",
    "nvmlSystemGetCudaDriverVersion_v2()": 12040,
    "nvmlSystemGetCudaDriverVersion()": 12040,
    "nvmlSystemGetNVMLVersion()": "12.550.54.15",
}


class FakeHandle:
    """A device handle: which GPU of the table."""

    def __init__(self, gpu: int) -> None:
        self.gpu = gpu

    def __repr__(self) -> str:
        return f"FakeHandle({self.gpu})"


class FakeEventSet:
    def __repr__(self) -> str:
        return "FakeEventSet()"


def _parse_key(key: str) -> tuple[str, tuple[Any, ...], tuple[tuple[str, Any], ...]]:
    """'f(NVML_A, k=nvmlB)' → ('f', (value of NVML_A,), (('k', value of nvmlB),))."""
    func, _, rest = key.partition("(")
    args: list[Any] = []
    kwargs: list[tuple[str, Any]] = []
    for part in filter(None, (p.strip() for p in rest.rstrip(")").split(","))):
        name, eq, value = part.partition("=")
        if eq:
            kwargs.append((name, _resolve(value)))
        else:
            args.append(_resolve(name))
    return func, tuple(args), tuple(sorted(kwargs))


def _resolve(name: str) -> Any:
    return int(name) if name.isdigit() else getattr(real, name)


def _struct(value: Any) -> Any:
    """A recorded answer as the binding would hand it back: dicts become structures."""
    if isinstance(value, dict):
        return types.SimpleNamespace(**{k: _struct(v) for k, v in value.items()})
    if isinstance(value, list):
        return [_struct(v) for v in value]
    return value


def _is_error(answer: Any) -> bool:
    return isinstance(answer, dict) and set(answer) == {"error"}


def _error_class(name: str) -> type[real.NVMLError]:
    return getattr(real, name)


class FakeNvml:
    """Stands in for the ``pynvml`` module; patch it where soak imports it."""

    def __init__(
        self,
        gpus: Iterable[Mapping[str, Any]],
        system: Mapping[str, Any] | None = None,
        *,
        hidden: Iterable[str] = (),
        init_error: str | None = None,
        lost_at_start: Iterable[int] = (),
        strict: bool = True,
    ) -> None:
        self.tables: list[dict[str, Any]] = [dict(g) for g in gpus]
        self.system: dict[str, Any] = {**BASELINE_SYSTEM, **(system or {})}
        self.hidden = set(hidden)
        self.init_error = init_error
        self.lost_at_start = set(lost_at_start)
        self.strict = strict
        self.lost: set[int] = set()
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.shutdowns = 0
        self.registered: dict[int, int] = {}
        self.events: queue.Queue[types.SimpleNamespace] = queue.Queue()
        self._waits = threading.Condition()
        self._returned = 0  # events the wait handed to the event thread
        self._handled = 0  # of those, how many the thread handled (it came back to wait again)
        self._handles = [FakeHandle(i) for i in range(len(self.tables))]
        self._index = [self._build_index(t) for t in self.tables]
        self._lock = threading.Lock()

    @classmethod
    def from_dump(cls, dump: Mapping[str, Any], **kwargs: Any) -> FakeNvml:
        """Replay a `probe_raw` dump (reads it lacks answer 'not supported')."""
        kwargs.setdefault("strict", False)
        return cls(copy.deepcopy(dump["devices"]), dump["system"], **kwargs)

    @classmethod
    def from_fixture(cls, name: str, **kwargs: Any) -> FakeNvml:
        return cls.from_dump(json.loads((FIXTURES / name).read_text()), **kwargs)

    # -- scenario controls ----------------------------------------------------------------------

    def set(self, gpu: int, key: str, answer: Any) -> None:
        """Change one answer of one GPU, e.g. mid-run."""
        with self._lock:
            self.tables[gpu][key] = answer
            self._index[gpu] = self._build_index(self.tables[gpu])

    def lose(self, gpu: int) -> None:
        """From now on every call on this GPU fails with 'GPU is lost'."""
        self.lost.add(gpu)

    def push_event(self, gpu: int, event_type: int, data: int) -> None:
        """An NVML event (e.g. ``nvmlEventTypeXidCriticalError``, XID code) for the wait."""
        self.events.put(
            types.SimpleNamespace(
                device=self._handles[gpu],
                eventType=event_type,
                eventData=data,
                gpuInstanceId=0xFFFFFFFF,
                computeInstanceId=0xFFFFFFFF,
            )
        )

    def wait_handled(self, n: int, timeout: float = 10.0) -> None:
        """Block until the event thread has handled ``n`` events in all: it has come back to
        wait for the next one after each. The timeout is only a guard against a hung thread."""
        with self._waits:
            if not self._waits.wait_for(lambda: self._handled >= n, timeout):
                raise AssertionError(f"fake pynvml: {self._handled} of {n} events handled")

    def count(self, name: str) -> int:
        return sum(1 for called, _ in self.calls if called == name)

    # -- the module surface ---------------------------------------------------------------------

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name in self.hidden or self._missing_everywhere(name):
            raise AttributeError(name)
        target = getattr(real, name)
        if not (name.startswith("nvml") and inspect.isfunction(target)):
            return target  # constants, structures, exception classes: the real ones
        impl = getattr(self, f"_fake_{name}", None) or self._replay(name)
        return self._checked(name, target, impl)

    def _checked(self, name: str, target: Callable[..., Any], impl: Callable[..., Any]) -> Any:
        signature = inspect.signature(target)

        def fn(*args: Any, **kwargs: Any) -> Any:
            signature.bind(*args, **kwargs)  # TypeError where the real binding would raise one
            self.calls.append((name, args))
            return impl(*args, **kwargs)

        fn.__name__ = name
        return fn

    def _missing_everywhere(self, name: str) -> bool:
        tables = [self.system, *self.tables]
        answers = [a for t in tables for k, a in t.items() if k.partition("(")[0] == name]
        return bool(answers) and all(a == MISSING_FUNCTION for a in answers)

    def _build_index(self, table: Mapping[str, Any]) -> dict[tuple[Any, ...], Any]:
        index = {}
        for key, answer in table.items():
            func, args, kwargs = _parse_key(key)
            index[(func, args, kwargs)] = answer
        return index

    def _answer(self, gpu: int | None, name: str, args: tuple[Any, ...], kwargs: Any) -> Any:
        key = (name, tuple(args), tuple(sorted(kwargs.items())))
        with self._lock:
            table = self._build_index(self.system) if gpu is None else self._index[gpu]
            if key not in table:
                if self.strict:
                    raise AssertionError(f"fake pynvml: GPU {gpu} has no answer for {key}")
                return err("NotSupported")
            return table[key]

    def _give(self, answer: Any) -> Any:
        if _is_error(answer):
            raise _error_class(answer["error"])()
        return _struct(answer)

    def _gpu(self, handle: FakeHandle) -> int:
        assert isinstance(handle, FakeHandle), f"not a device handle: {handle!r}"
        if handle.gpu in self.lost:
            raise real.NVMLError_GpuIsLost()
        return handle.gpu

    def _replay(self, name: str) -> Callable[..., Any]:
        if name.startswith("nvmlSystem"):
            return lambda *a, **k: self._give(self._answer(None, name, a, k))
        return lambda handle, *a, **k: self._give(self._answer(self._gpu(handle), name, a, k))

    # -- functions with behaviour beyond a table ------------------------------------------------

    def _fake_nvmlInit(self) -> None:
        if self.init_error:
            raise _error_class(self.init_error)()

    def _fake_nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def _fake_nvmlDeviceGetCount(self) -> int:
        if "nvmlDeviceGetCount()" in self.system:
            return self._give(self.system["nvmlDeviceGetCount()"])
        return len(self.tables)

    def _fake_nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:
        if index in self.lost_at_start:
            raise real.NVMLError_GpuIsLost()
        return self._handles[index]

    def _fake_nvmlDeviceGetFieldValues(
        self, handle: FakeHandle, fieldIds: list[int]
    ) -> list[types.SimpleNamespace]:
        gpu = self._gpu(handle)
        return [self._field(gpu, field_id) for field_id in fieldIds]

    def _field(self, gpu: int, field_id: int) -> types.SimpleNamespace:
        answer = self._answer(gpu, "nvmlDeviceGetFieldValues", (field_id,), {})
        entry = types.SimpleNamespace(
            fieldId=field_id, scopeId=0, timestamp=0, latencyUsec=0, valueType=0, nvmlReturn=0
        )
        if _is_error(answer):
            entry.nvmlReturn = _error_class(answer["error"])().value
            entry.value = types.SimpleNamespace()
        else:
            entry.valueType = answer["type"]
            entry.value = types.SimpleNamespace(**{_MEMBERS[answer["type"]]: answer["value"]})
        return entry

    def _fake_nvmlEventSetCreate(self) -> FakeEventSet:
        answer = self.system.get("nvmlEventSetCreate()")
        if answer is not None:
            self._give(answer)
        return FakeEventSet()

    def _fake_nvmlDeviceRegisterEvents(
        self, handle: FakeHandle, eventTypes: int, eventSet: FakeEventSet
    ) -> None:
        gpu = self._gpu(handle)
        answer = self.tables[gpu].get("nvmlDeviceRegisterEvents()")
        if answer is not None:
            self._give(answer)
        self.registered[gpu] = eventTypes

    def _fake_nvmlEventSetWait_v2(self, eventSet: FakeEventSet, timeoutms: int) -> Any:
        with self._waits:  # back to wait: every event handed out before is handled
            self._handled = self._returned
            self._waits.notify_all()
        try:
            event = self.events.get(timeout=timeoutms / 1000)
        except queue.Empty:
            raise real.NVMLError_Timeout() from None
        with self._waits:
            self._returned += 1
        return event

    def _fake_nvmlEventSetWait(self, eventSet: FakeEventSet, timeoutms: int) -> Any:
        return self._fake_nvmlEventSetWait_v2(eventSet, timeoutms)

    def _fake_nvmlEventSetFree(self, eventSet: FakeEventSet) -> None:
        return None
