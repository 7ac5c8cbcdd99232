"""A fake ``amdsmi`` module built from per-GPU answer tables.

amdsmi is not installed here, so the fake copies the real binding's surface by hand from
ROCm's ``py-interface/amdsmi_interface.py`` (6.x/7.x): function names and parameter names,
the enums (``AmdSmiTemperatureType.JUNCTION`` is an alias of ``HOTSPOT``, as in the real
IntEnum), the exception classes with ``err_code``, ``amdsmi_wrapper.AMDSMI_STATUS_*``, dict
answers with ``"N/A"`` for values the GPU does not have, and the real binding's type checks on
enum arguments (``AmdSmiParameterException``).

A GPU is a dict from read name (``"amdsmi_get_clock_info(AmdSmiClkType.GFX)"``) to the answer
or ``{"error": "AMDSMI_STATUS_NOT_SUPPORTED"}``; a read the table lacks fails the test.
"""

from __future__ import annotations

import enum
import types
from collections.abc import Iterable, Mapping
from typing import Any

NA = "N/A"

amdsmi_wrapper = types.SimpleNamespace(
    AMDSMI_STATUS_SUCCESS=0,
    AMDSMI_STATUS_INVAL=1,
    AMDSMI_STATUS_NOT_SUPPORTED=2,
    AMDSMI_STATUS_NOT_YET_IMPLEMENTED=3,
    AMDSMI_STATUS_FAIL_LOAD_MODULE=4,
    AMDSMI_STATUS_FAIL_LOAD_SYMBOL=5,
    AMDSMI_STATUS_DRM_ERROR=6,
    AMDSMI_STATUS_API_FAILED=7,
    AMDSMI_STATUS_TIMEOUT=8,
    AMDSMI_STATUS_RETRY=9,
    AMDSMI_STATUS_NO_PERM=10,
    AMDSMI_STATUS_INTERRUPT=11,
    AMDSMI_STATUS_IO=12,
    AMDSMI_STATUS_FILE_ERROR=14,
    AMDSMI_STATUS_INIT_ERROR=18,
    AMDSMI_STATUS_BUSY=30,
    AMDSMI_STATUS_NOT_FOUND=31,
    AMDSMI_STATUS_NOT_INIT=32,
    AMDSMI_STATUS_DRIVER_NOT_LOADED=34,
    AMDSMI_STATUS_NO_DATA=40,
    AMDSMI_STATUS_UNKNOWN_ERROR=0xFFFFFFFF,
)


class AmdSmiException(Exception):
    """Base of the binding's exceptions."""


class AmdSmiLibraryException(AmdSmiException):
    def __init__(self, err_code: int) -> None:
        err_code = abs(err_code)
        super().__init__(err_code)
        self.err_code = err_code

    def get_error_code(self) -> int:
        return self.err_code


class AmdSmiRetryException(AmdSmiLibraryException):
    def __init__(self) -> None:
        super().__init__(amdsmi_wrapper.AMDSMI_STATUS_RETRY)


class AmdSmiParameterException(AmdSmiException):
    def __init__(self, received: Any, expected: Any) -> None:
        super().__init__(f"Invalid parameter: {type(received)} is not {expected}")


class AmdSmiInitFlags(enum.IntEnum):
    INIT_ALL_PROCESSORS = 0xFFFFFFFF
    INIT_AMD_CPUS = 1
    INIT_AMD_GPUS = 2


class AmdSmiClkType(enum.IntEnum):
    SYS = 0
    GFX = 0  # an alias, as in the real enum
    DF = 1
    DCEF = 2
    SOC = 3
    MEM = 4
    PCIE = 5


class AmdSmiTemperatureType(enum.IntEnum):
    EDGE = 0
    HOTSPOT = 1
    JUNCTION = 1  # an alias of HOTSPOT, as in the real enum
    VRAM = 2
    HBM_0 = 3
    HBM_1 = 4
    HBM_2 = 5
    HBM_3 = 6
    PLX = 7


class AmdSmiTemperatureMetric(enum.IntEnum):
    CURRENT = 0
    MAX = 1
    MIN = 2
    MAX_HYST = 3
    MIN_HYST = 4
    CRITICAL = 5
    CRITICAL_HYST = 6
    EMERGENCY = 7
    EMERGENCY_HYST = 8


class AmdSmiMemoryPageStatus(enum.IntEnum):
    RESERVED = 0
    PENDING = 1
    UNRESERVABLE = 2


def err(status: str) -> dict[str, str]:
    """The answer 'this read fails with AMDSMI_STATUS_<status>'."""
    return {"error": f"AMDSMI_STATUS_{status}"}


MISSING_FUNCTION = {"error": "AttributeError"}


def baseline_gpu(index: int) -> dict[str, Any]:
    """A healthy MI300X-like GPU under load, as amdsmi 6.4 answers."""
    temp = "amdsmi_get_temp_metric"
    return {
        "amdsmi_get_gpu_asic_info()": {
            "market_name": "AMD Instinct MI300X",
            "vendor_id": "0x1002",
            "device_id": "0x74a1",
            "asic_serial": f"0x5D2F4A1C0000{index:04X}",
            "oam_id": index,
            "num_compute_units": 304,
            "target_graphics_version": "gfx942",
        },
        "amdsmi_get_gpu_board_info()": {
            "model_number": "102-G30211-00",
            "product_serial": f"692325000{index:03d}",
            "product_name": "AMD Instinct MI300X OAM",
            "manufacturer_name": "AMD",
        },
        "amdsmi_get_gpu_device_uuid()": f"{index:02x}ff74a1-0000-1000-80d6-6f3d1e2a9c{index:02x}",
        "amdsmi_get_gpu_device_bdf()": f"0000:{0x0C + 0x10 * index:02x}:00.0",
        "amdsmi_get_gpu_vbios_info()": {
            "name": "AMD MI300X_HW_SRIOV_CVS_1VF",
            "build_date": "2024/01/18 17:24",
            "part_number": "113-M3000100-102",
            "version": "022.040.003.043.000001",
        },
        "amdsmi_get_gpu_driver_info()": {
            "driver_name": "amdgpu",
            "driver_version": "6.8.5",
            "driver_date": "2015/01/01 00:00",
        },
        "amdsmi_get_gpu_vram_info()": {
            "vram_type": 8,
            "vram_vendor": 1,
            "vram_size": 196592,
            "vram_bit_width": 8192,
            "vram_max_bandwidth": NA,
        },
        "amdsmi_get_gpu_vram_usage()": {"vram_total": 196592, "vram_used": 180000},
        "amdsmi_get_power_cap_info()": {
            "power_cap": 750_000_000,
            "default_power_cap": 750_000_000,
            "dpm_cap": 2100,
            "min_power_cap": 0,
            "max_power_cap": 750_000_000,
        },
        "amdsmi_get_clock_info(AmdSmiClkType.SYS)": {
            "clk": 2100,
            "min_clk": 500,
            "max_clk": 2100,
            "clk_locked": False,
            "clk_deep_sleep": NA,
        },
        "amdsmi_get_clock_info(AmdSmiClkType.MEM)": {
            "clk": 1300,
            "min_clk": 900,
            "max_clk": 1300,
            "clk_locked": False,
            "clk_deep_sleep": NA,
        },
        f"{temp}(AmdSmiTemperatureType.EDGE, AmdSmiTemperatureMetric.CURRENT)": err(
            "NOT_SUPPORTED"
        ),
        f"{temp}(AmdSmiTemperatureType.HOTSPOT, AmdSmiTemperatureMetric.CURRENT)": 75 + index,
        f"{temp}(AmdSmiTemperatureType.VRAM, AmdSmiTemperatureMetric.CURRENT)": 66 + index,
        f"{temp}(AmdSmiTemperatureType.HOTSPOT, AmdSmiTemperatureMetric.CRITICAL)": 100,
        f"{temp}(AmdSmiTemperatureType.HOTSPOT, AmdSmiTemperatureMetric.EMERGENCY)": 110,
        f"{temp}(AmdSmiTemperatureType.VRAM, AmdSmiTemperatureMetric.CRITICAL)": 105,
        "amdsmi_get_gpu_metrics_info()": {
            "temperature_edge": NA,
            "temperature_hotspot": 75 + index,
            "temperature_mem": 66 + index,
            "average_gfx_activity": 100,
            "average_umc_activity": 38,
            "average_socket_power": NA,
            "current_socket_power": 700,
            "energy_accumulator": 9_000_000,
            "current_gfxclk": 2100,
            "current_uclk": 1300,
            "throttle_status": NA,
            "indep_throttle_status": NA,
        },
        "amdsmi_get_power_info()": {
            "socket_power": 700,
            "current_socket_power": 700,
            "average_socket_power": NA,
            "gfx_voltage": NA,
            "soc_voltage": NA,
            "mem_voltage": NA,
            "power_limit": 750,
        },
        "amdsmi_get_energy_count()": {
            "energy_accumulator": 1_000_000_000,
            "counter_resolution": 15.259,
            "timestamp": 1_700_000_000_000,
        },
        "amdsmi_get_gpu_activity()": {"gfx_activity": 100, "umc_activity": 38, "mm_activity": NA},
        "amdsmi_get_gpu_fan_speed(0)": err("NOT_SUPPORTED"),
        "amdsmi_get_violation_status()": {
            "reference_timestamp": 1_700_000_000_000_000,
            "violation_timestamp": 0,
            "acc_counter": 1000,
            "acc_prochot_thrm": 0,
            "acc_ppt_pwr": 0,
            "acc_socket_thrm": 0,
            "acc_vr_thrm": 0,
            "acc_hbm_thrm": 0,
            "per_ppt_pwr": 0,
            "per_socket_thrm": 0,
            "active_prochot_thrm": False,
            "active_ppt_pwr": False,
            "active_socket_thrm": False,
            "active_vr_thrm": False,
            "active_hbm_thrm": False,
        },
        "amdsmi_get_gpu_total_ecc_count()": {
            "correctable_count": 0,
            "uncorrectable_count": 0,
            "deferred_count": 0,
        },
        "amdsmi_get_gpu_bad_page_info()": [],
        "amdsmi_get_gpu_pci_replay_counter()": 0,
        "amdsmi_get_gpu_process_list()": [],
        "amdsmi_get_pcie_info()": {"pcie_metric": {"pcie_replay_count": 0}},
        "amdsmi_get_gpu_enumeration_info()": {
            "drm_render": 128 + index,
            "drm_card": index,
            "hsa_id": index + 2,
            "hip_id": index,
            "hip_uuid": f"GPU-5d2f4a1c0000{index:04x}",
        },
    }


class FakeHandle:
    """amdsmi_processor_handle: which GPU of the table."""

    def __init__(self, gpu: int) -> None:
        self.gpu = gpu

    def __repr__(self) -> str:
        return f"FakeHandle({self.gpu})"


def _arg_name(value: Any) -> str:
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    return str(value)


def _check(value: Any, kind: type) -> None:
    if not isinstance(value, kind):  # the real binding checks its enum arguments like this
        raise AmdSmiParameterException(value, kind)


class FakeAmdSmi:
    """Stands in for the ``amdsmi`` module; patch it where soak imports it."""

    amdsmi_wrapper = amdsmi_wrapper
    AmdSmiException = AmdSmiException
    AmdSmiLibraryException = AmdSmiLibraryException
    AmdSmiRetryException = AmdSmiRetryException
    AmdSmiParameterException = AmdSmiParameterException
    AmdSmiInitFlags = AmdSmiInitFlags
    AmdSmiClkType = AmdSmiClkType
    AmdSmiTemperatureType = AmdSmiTemperatureType
    AmdSmiTemperatureMetric = AmdSmiTemperatureMetric
    AmdSmiMemoryPageStatus = AmdSmiMemoryPageStatus

    def __init__(
        self,
        gpus: Iterable[Mapping[str, Any]],
        *,
        hidden: Iterable[str] = (),
        init_error: str | None = None,
    ) -> None:
        self.tables = [dict(g) for g in gpus]
        self.hidden = set(hidden)
        self.init_error = init_error
        self.lost: set[int] = set()
        self.shutdowns = 0
        self.calls: list[str] = []

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("amdsmi_") and name in object.__getattribute__(self, "hidden"):
            raise AttributeError(name)
        return object.__getattribute__(self, name)

    # -- scenario controls ----------------------------------------------------------------------

    def set(self, gpu: int, key: str, answer: Any) -> None:
        self.tables[gpu][key] = answer

    def lose(self, gpu: int) -> None:
        """From now on every call on this GPU fails with an I/O error."""
        self.lost.add(gpu)

    # -- replay ---------------------------------------------------------------------------------

    def _answer(self, func: str, handle: FakeHandle, *args: Any) -> Any:
        assert isinstance(handle, FakeHandle), f"not a processor handle: {handle!r}"
        self.calls.append(func)
        if handle.gpu in self.lost:
            raise AmdSmiLibraryException(amdsmi_wrapper.AMDSMI_STATUS_IO)
        key = f"{func}({', '.join(_arg_name(a) for a in args)})"
        table = self.tables[handle.gpu]
        if key not in table:
            raise AssertionError(f"fake amdsmi: GPU {handle.gpu} has no answer for {key}")
        answer = table[key]
        if isinstance(answer, dict) and set(answer) == {"error"}:
            raise AmdSmiLibraryException(getattr(amdsmi_wrapper, answer["error"]))
        return answer

    # -- the binding's functions, with its parameter names --------------------------------------

    def amdsmi_init(self, flag: AmdSmiInitFlags = AmdSmiInitFlags.INIT_AMD_GPUS) -> None:
        _check(flag, AmdSmiInitFlags)
        if self.init_error:
            raise AmdSmiLibraryException(getattr(amdsmi_wrapper, self.init_error))

    def amdsmi_shut_down(self) -> None:
        self.shutdowns += 1

    def amdsmi_get_processor_handles(self) -> list[FakeHandle]:
        return [FakeHandle(i) for i in range(len(self.tables))]

    def amdsmi_get_gpu_asic_info(self, processor_handle: FakeHandle) -> Any:
        return self._answer("amdsmi_get_gpu_asic_info", processor_handle)

    def amdsmi_get_gpu_board_info(self, processor_handle: FakeHandle) -> Any:
        return self._answer("amdsmi_get_gpu_board_info", processor_handle)

    def amdsmi_get_gpu_device_uuid(self, processor_handle: FakeHandle) -> Any:
        return self._answer("amdsmi_get_gpu_device_uuid", processor_handle)

    def amdsmi_get_gpu_device_bdf(self, processor_handle: FakeHandle) -> Any:
        return self._answer("amdsmi_get_gpu_device_bdf", processor_handle)

    def amdsmi_get_gpu_vbios_info(self, processor_handle: FakeHandle) -> Any:
        return self._answer("amdsmi_get_gpu_vbios_info", processor_handle)

    def amdsmi_get_gpu_driver_info(self, processor_handle: FakeHandle) -> Any:
        return self._answer("amdsmi_get_gpu_driver_info", processor_handle)

    def amdsmi_get_gpu_vram_info(self, processor_handle: FakeHandle) -> Any:
        return self._answer("amdsmi_get_gpu_vram_info", processor_handle)

    def amdsmi_get_gpu_vram_usage(self, processor_handle: FakeHandle) -> Any:
        return self._answer("amdsmi_get_gpu_vram_usage", processor_handle)

    def amdsmi_get_power_cap_info(self, processor_handle: FakeHandle) -> Any:
        return self._answer("amdsmi_get_power_cap_info", processor_handle)

    def amdsmi_get_clock_info(self, processor_handle: FakeHandle, clock_type: AmdSmiClkType) -> Any:
        _check(clock_type, AmdSmiClkType)
        return self._answer("amdsmi_get_clock_info", processor_handle, clock_type)

    def amdsmi_get_temp_metric(
        self,
        processor_handle: FakeHandle,
        sensor_type: AmdSmiTemperatureType,
        metric: AmdSmiTemperatureMetric,
    ) -> Any:
        _check(sensor_type, AmdSmiTemperatureType)
        _check(metric, AmdSmiTemperatureMetric)
        return self._answer("amdsmi_get_temp_metric", processor_handle, sensor_type, metric)

    def amdsmi_get_gpu_metrics_info(self, processor_handle: FakeHandle) -> Any:
        return self._answer("amdsmi_get_gpu_metrics_info", processor_handle)

    def amdsmi_get_power_info(self, processor_handle: FakeHandle, sensor_ind: int = 0) -> Any:
        return self._answer("amdsmi_get_power_info", processor_handle)

    def amdsmi_get_energy_count(self, processor_handle: FakeHandle) -> Any:
        return self._answer("amdsmi_get_energy_count", processor_handle)

    def amdsmi_get_gpu_activity(self, processor_handle: FakeHandle) -> Any:
        return self._answer("amdsmi_get_gpu_activity", processor_handle)

    def amdsmi_get_gpu_fan_speed(self, processor_handle: FakeHandle, sensor_idx: int) -> Any:
        _check(sensor_idx, int)
        return self._answer("amdsmi_get_gpu_fan_speed", processor_handle, sensor_idx)

    def amdsmi_get_violation_status(self, processor_handle: FakeHandle) -> Any:
        return self._answer("amdsmi_get_violation_status", processor_handle)

    def amdsmi_get_gpu_total_ecc_count(self, processor_handle: FakeHandle) -> Any:
        return self._answer("amdsmi_get_gpu_total_ecc_count", processor_handle)

    def amdsmi_get_gpu_bad_page_info(self, processor_handle: FakeHandle) -> Any:
        return self._answer("amdsmi_get_gpu_bad_page_info", processor_handle)

    def amdsmi_get_gpu_process_list(self, processor_handle: FakeHandle) -> Any:
        return self._answer("amdsmi_get_gpu_process_list", processor_handle)

    def amdsmi_get_gpu_pci_replay_counter(self, processor_handle: FakeHandle) -> Any:
        return self._answer("amdsmi_get_gpu_pci_replay_counter", processor_handle)

    def amdsmi_get_pcie_info(self, processor_handle: FakeHandle) -> Any:
        return self._answer("amdsmi_get_pcie_info", processor_handle)

    def amdsmi_get_gpu_enumeration_info(self, processor_handle: FakeHandle) -> Any:
        return self._answer("amdsmi_get_gpu_enumeration_info", processor_handle)
