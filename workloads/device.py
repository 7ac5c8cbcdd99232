"""What a device offers and how to time work on it, shared by every workload.

Sizes scale to the device: a GPU's memory from ``torch.cuda.mem_get_info``, a CPU's from
``/proc/meminfo`` and its last-level cache from sysfs. Timing syncs the device, so a
step's end is when its work has finished, not when it was queued.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import torch

from workloads.base import WorkloadOptions

GIB = 1 << 30
MIB = 1 << 20
CUDA_RESERVE_B = 2 * GIB  # left free on a GPU: CUDA context, cuBLAS workspaces, checks
CPU_HOLD_CAP_B = 512 * MIB  # most a CPU workload holds by default, so setup takes seconds
DEFAULT_LLC_B = 64 * MIB  # assumed last-level cache where sysfs does not say
CACHE_DIR = Path("/sys/devices/system/cpu/cpu0/cache")
MEMINFO = Path("/proc/meminfo")
CPUINFO = Path("/proc/cpuinfo")

# CPU flags that mean bf16 matrix products run natively (oneDNN uses them for bf16 matmul):
# the AMX tile unit, then the AVX-512 dot product. Measured on a 2-core Sapphire Rapids
# guest with torch 2.13, a @ b.T at n = 1024: bf16 804 GFLOP/s, int8 (torch._int_mm) 97,
# fp32 63, fp16 60 (no amx_fp16), fp8 (torch._scaled_mm) under 1. So neither int8 nor fp8
# is hotter than bf16 on a CPU, and fp32 is the fallback.
NATIVE_BF16_FLAGS = ("amx_bf16", "avx512_bf16")

TORCH_DTYPES = {
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "tf32": torch.float32,
    "fp32": torch.float32,
    "fp64": torch.float64,
    "fp8": torch.float8_e4m3fn,
}


def open_device(name: str, options: WorkloadOptions) -> torch.device:
    """The torch device for ``name``, made current; on a CPU, the thread count applied."""
    device = torch.device(name)
    if device.type == "cuda":
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        torch.cuda.set_device(device)
    elif options.cpu_threads is not None:
        torch.set_num_threads(options.cpu_threads)
    return device


def synchronize(device: torch.device) -> None:
    """Wait until the device has finished all queued work (a no-op on a CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def memory_budget_b(device: torch.device, options: WorkloadOptions) -> int:
    """Bytes a workload may hold: ``mem_bytes``, else ``mem_fraction`` of the device's
    memory, never more than is free less a reserve (GPU) or than a few seconds of setup
    fill (CPU)."""
    if options.mem_bytes is not None:
        return options.mem_bytes
    if device.type == "cuda":
        free_b, total_b = torch.cuda.mem_get_info(device)
        return max(0, int(min(options.mem_fraction * total_b, free_b - CUDA_RESERVE_B)))
    available = mem_available_b()
    share = options.mem_fraction * available if available is not None else CPU_HOLD_CAP_B
    return int(min(share, CPU_HOLD_CAP_B))


def mem_available_b() -> int | None:
    """MemAvailable from /proc/meminfo, or None where it cannot be read."""
    try:
        text = MEMINFO.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024  # in kB
    return None


def last_level_cache_b() -> int:
    """Size of the largest cache cpu0 sees (its L3 on most servers), or a safe default."""
    sizes = [_cache_size_b(index) for index in sorted(CACHE_DIR.glob("index*"))]
    known = [s for s in sizes if s is not None]
    return max(known) if known else DEFAULT_LLC_B


def _cache_size_b(index_dir: Path) -> int | None:
    try:
        text = (index_dir / "size").read_text().strip()
    except OSError:
        return None
    scale = {"K": 1024, "M": MIB, "G": GIB}.get(text[-1:].upper(), 1)
    digits = text.rstrip("KMGkmg")
    return int(digits) * scale if digits.isdigit() else None


def cpu_count() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


@dataclass(frozen=True, slots=True)
class DtypeChoice:
    """The GEMM dtype a workload runs and why, in words the report shows."""

    name: str  # one of DTYPE_NAMES
    reason: str  # "CPU has amx_bf16", "asked"


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags: /proc/cpuinfo's ``flags`` line (Linux x86), else the
    features torch's own check (``torch.cpu.get_capabilities``) finds present."""
    try:
        text = CPUINFO.read_text()
    except OSError:
        text = ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return frozenset(value.split())
    capabilities = torch.cpu.get_capabilities()
    return frozenset(k for k, v in capabilities.items() if v is True)


def cpu_gemm_dtype(flags: Iterable[str]) -> DtypeChoice:
    """The hottest dtype a CPU with ``flags`` multiplies matrices in natively: bf16 where
    it has AMX-BF16 or AVX512-BF16, fp32 otherwise."""
    present = set(flags)
    for flag in NATIVE_BF16_FLAGS:
        if flag in present:
            return DtypeChoice("bf16", f"CPU has {flag}")
    return DtypeChoice("fp32", f"CPU has no {' or '.join(NATIVE_BF16_FLAGS)}")


def supports_bf16(device: torch.device) -> bool:
    """Whether bf16 matrix products run natively (compute capability 8.0+ on NVIDIA, AMX-BF16
    or AVX512-BF16 on a CPU)."""
    if device.type != "cuda":
        return cpu_gemm_dtype(cpu_flags()).name == "bf16"
    return torch.cuda.get_device_capability(device) >= (8, 0)


def supports_fp8(device: torch.device) -> bool:
    """Whether ``torch._scaled_mm`` has e4m3 kernels here (compute capability 8.9+; CPUs
    where this torch build has them)."""
    if device.type == "cuda":
        return torch.cuda.get_device_capability(device) >= (8, 9)
    return _cpu_scaled_mm_works()


def _cpu_scaled_mm_works() -> bool:
    a = torch.zeros(16, 16).to(torch.float8_e4m3fn)
    one = torch.ones((), dtype=torch.float32)
    try:
        torch._scaled_mm(a, a.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    except (RuntimeError, NotImplementedError):
        return False
    return True


def resolve_dtype(name: str | None, device: torch.device) -> DtypeChoice:
    """The GEMM dtype to use and why: the asked one if the device can run it, else the
    hottest the device runs natively (bf16, then fp16 on GPUs; see ``cpu_gemm_dtype`` on
    CPUs). Raises ValueError, one line naming the dtype, for a dtype the device cannot run.
    A CPU without native bf16 still runs an asked bf16 (torch converts in software)."""
    if name is None:
        if device.type != "cuda":
            return cpu_gemm_dtype(cpu_flags())
        if supports_bf16(device):
            return DtypeChoice("bf16", "GPU has bf16 tensor cores")
        return DtypeChoice("fp16", "GPU has no bf16 tensor cores (compute capability < 8.0)")
    check_dtype(name, device)
    return DtypeChoice(name, "asked")


def check_dtype(name: str, device: torch.device) -> None:
    """Raise ValueError, one line naming the dtype, if ``device`` cannot run it at all."""
    if name == "tf32" and device.type != "cuda":
        raise ValueError("dtype: tf32 needs a CUDA device")
    if name == "bf16" and device.type == "cuda" and not supports_bf16(device):
        raise ValueError(f"dtype: {device} has no native bf16 matrix products")
    if name == "fp8" and not supports_fp8(device):
        raise ValueError(f"dtype: {device} has no fp8 matrix products in this torch build")


def set_matmul_precision(dtype_name: str) -> None:
    """Allow TF32 for float32 products only when the workload asked for tf32."""
    torch.set_float32_matmul_precision("high" if dtype_name == "tf32" else "highest")


def calibrate_unit_s(
    device: torch.device, run_units: Callable[[int], object], target_s: float
) -> float:
    """Seconds one unit of work takes: warm up, then time a doubling number of units until
    the timed run lasts at least ``target_s`` (so tiny units are timed over many)."""
    run_units(1)
    synchronize(device)
    count = 1
    while True:
        t0 = time.monotonic()
        run_units(count)
        synchronize(device)
        elapsed = time.monotonic() - t0
        if elapsed >= target_s or count >= 1 << 20:
            return max(elapsed, 1e-9) / count
        count *= 2


class StepSizer:
    """Timed steps of about ``step_s``, each ``count`` units that ``run_units(count)`` queues
    (returning their work). A unit's time is calibrated over about ``calibrate_s`` at
    construction; ``count`` is corrected after every step by the step's measured length (at
    most by half or double, so one outlier does not swing it)."""

    def __init__(
        self,
        device: torch.device,
        run_units: Callable[[int], float],
        step_s: float,
        calibrate_s: float,
    ) -> None:
        self.device = device
        self.run_units = run_units
        self.step_s = step_s
        self.unit_s = calibrate_unit_s(device, run_units, min(calibrate_s, step_s / 4))
        self.count = max(1, math.ceil(step_s / max(self.unit_s, 1e-9)))

    def step(self) -> tuple[float, float, float]:
        """Queue one step's units and wait until the device has run them: the step's start
        and end (``time.monotonic()``) and its work."""
        t0 = time.monotonic()
        work = self.run_units(self.count)
        synchronize(self.device)
        t1 = time.monotonic()
        if t1 > t0:
            ratio = min(2.0, max(0.5, self.step_s / (t1 - t0)))
            self.count = max(1, round(self.count * ratio))
        return t0, t1, work
