"""GEMM: large matrix products at the dtype that heats the device most, with checked results.

On a GPU the operands are a ring of random matrices filling the memory share, taken in pairs
so that no product finds its inputs in a cache. On a CPU they are one pair, the operands the
size calibration timed: a CPU's matrix unit (AMX) fed from DRAM ran at about 0.85 of its
cache-fed rate, and the memory is membw's to load. Every ``verify`` recomputes the step's
last product in a reference precision on the same device and compares element by element,
and draws that product's two operands again from their seeds to compare them bit for bit (a
product and its reference agree on an operand corrupted in memory); a fixed, seeded product
gives a checksum that is bit-identical on devices of the same kind.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from workloads.base import PartWork, StepResult, Verification, WorkloadOptions
from workloads.device import (
    TORCH_DTYPES,
    StepSizer,
    memory_budget_b,
    open_device,
    resolve_dtype,
    set_matmul_precision,
    synchronize,
)

FIXED_SEED = 0x50A4  # seed of the fixed product whose checksum devices of one kind share
FIXED_N = {"cuda": 2048, "cpu": 256}  # side of that product, at most the working side
MAX_RING = 1024  # operand matrices at most; more only costs setup time
VERIFY_BLOCK_ELEMENTS = 1 << 24  # reference rows per block, so a check holds ~64 MiB at fp32
INT_OF_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}  # bit views
# On an H200, 12288 was the best or within 0.5 % of the best side for every dtype, 2.6 %
# above 8192 in bf16 (bench/workload_efficiency.py); a GPU keeps it without calibrating.
CUDA_N = 12288
# A CPU's best side depends on its matrix unit and dtype (on one AMX guest bf16 peaked at
# 1024 and fp32 at 4096), so setup times these and keeps the fastest.
CPU_SIZES = (1024, 2048, 3072, 4096)
# Operands a CPU rotates: the pair the calibration timed. Measured side by side on a 2-core
# AMX guest at bf16, n = 1024 (bench/workload_efficiency.py --ring): soak reached 0.95 of
# the best bare rate with 2, 0.85 with the 240 that filled its 480 MiB share.
CPU_RING = 2
CALIBRATE_S = 4.0  # most seconds the size calibration should take, all sides together
CALIBRATE_PASSES = 2  # sweeps over the sides, each side's best kept: a busy moment passes
# Rows of the last product a CPU checks per verification, a different block each time: its
# reference (fp64 for fp32) runs at a fraction of the product's rate, and a whole one at
# n = 4096 took seconds of every ten on a 2-core host. A GPU checks every row.
CPU_VERIFY_ROWS = 256


@dataclass(frozen=True, slots=True)
class Tolerance:
    """How far a product may be from its reference: ``rtol`` of each element's reference
    value (the output's rounding) plus ``atol`` of the reference's RMS (operand rounding and
    accumulation order, which scale with the product's natural size)."""

    rtol: float
    atol: float


# bf16/fp8 outputs round to 8 significant bits (2^-9 relative) and cuBLAS may reduce split-K
# partials in bf16; fp16 rounds to 11 bits; tf32 operands round (or truncate) to 11 bits;
# fp32 and fp64 differ from their reference by accumulation order alone. Measured worst
# element on an H200 at n = 8192, in units of the RMS: bf16 0.015, fp8 0.021, fp16 0.0026,
# tf32 0.0017, fp32 2.5e-5, fp64 4.9e-14. Each bound (rtol of |ref| plus atol of the RMS)
# leaves a margin of 2-4x at the floor and more where |ref| is large, and stays far below
# what a flipped exponent or high mantissa bit does (0.5 of the RMS or more).
TOLERANCES = {
    "bf16": Tolerance(rtol=8e-3, atol=4e-2),
    "fp8": Tolerance(rtol=8e-3, atol=4e-2),
    "fp16": Tolerance(rtol=2e-3, atol=1e-2),
    "tf32": Tolerance(rtol=0.0, atol=2e-2),
    "fp32": Tolerance(rtol=1e-5, atol=3e-4),
    "fp64": Tolerance(rtol=1e-10, atol=1e-10),
}
# fp64 is checked against fp64 summed in two halves of k: a different computation, the same
# precision.
REFERENCE_DTYPES = {
    "bf16": torch.float32,
    "fp8": torch.float32,
    "fp16": torch.float32,
    "tf32": torch.float32,
    "fp32": torch.float64,
    "fp64": torch.float64,
}


@dataclass(frozen=True, slots=True)
class SizeChoice:
    """The matrix side a GEMM runs and why; ``rates`` has the FLOP/s measured per side."""

    n: int
    reason: str
    rates: dict[int, float]


def fastest_size(
    sides: Sequence[int],
    measure: Callable[[int, float], tuple[float, float]],
    budget_s: float,
    passes: int = CALIBRATE_PASSES,
) -> SizeChoice:
    """Time each side in ``sides`` (ascending) for an equal share of ``budget_s``, in
    ``passes`` sweeps, and keep the side with the best rate. ``measure(n, seconds)`` returns
    the rate at side ``n`` and how long its first product took; a side whose one product
    outlasts the share ends the sweep and is not timed again, since larger ones take longer
    still."""
    share = budget_s / (len(sides) * passes)
    rates: dict[int, float] = {}
    tried = list(sides)
    for _ in range(passes):
        for k, n in enumerate(tried):
            rate, product_s = measure(n, share)
            rates[n] = max(rate, rates.get(n, 0.0))
            if product_s > share:
                tried = tried[: k + 1]
                break
    best = max(rates, key=lambda n: rates[n])
    text = ", ".join(f"{n}: {rates[n] / 1e9:.4g}" for n in sorted(rates))
    return SizeChoice(best, f"fastest at start; GFLOP/s by side: {text}", rates)


@contextmanager
def highest_precision() -> Iterator[None]:
    """float32 products in full float32 (no TF32, no bf16 passes) for the duration."""
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)


class GemmWorkload:
    """Square matrix products ``C = A @ B.T`` over a ring of operands; reports FLOP."""

    name = "gemm"
    unit = "FLOP"

    def __init__(self, options: WorkloadOptions) -> None:
        self.options = options
        self.ring: list[torch.Tensor] = []
        self.outputs: list[torch.Tensor] = []
        self.last: tuple[int, int, int] | None = None  # ring a, ring b, output of last product
        self._cursor = 0
        self._out_cursor = 0
        self._row_cursor = 0  # first row a CPU's next verification checks
        self._checksum: str | None = None

    def setup(self, device: str, seed: int) -> None:
        self.device = open_device(device, self.options)
        self.dtype_choice = resolve_dtype(self.options.dtype, self.device)
        self.dtype_name = self.dtype_choice.name
        set_matmul_precision(self.dtype_name)
        self.dtype = TORCH_DTYPES[self.dtype_name]
        self.out_dtype = torch.bfloat16 if self.dtype_name == "fp8" else self.dtype
        self._one = torch.ones((), dtype=torch.float32, device=self.device)
        self.seed = seed
        self.size = self._choose_size()
        self.n = self.size.n
        self.flop_per_product = 2.0 * self.n**3
        self.ring = self._make_ring()
        self.outputs = [self._empty_output(self.n) for _ in range(2)]
        self._fixed = self._fixed_operands()
        self._checksum = self._fixed_checksum()
        self.sizer = StepSizer(self.device, self.enqueue, self.options.step_s, calibrate_s=0.2)

    def enqueue(self, count: int) -> float:
        """Queue ``count`` products on the current stream; their FLOP."""
        ring = self.ring
        for _ in range(count):
            i = self._cursor
            j = (i + 1) % len(ring)
            o = self._out_cursor
            self.product(ring[i], ring[j], self.outputs[o])
            self.last = (i, j, o)
            self._cursor = (i + 2) % len(ring)
            self._out_cursor = 1 - o
        return count * self.flop_per_product

    def product(self, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
        """``out = a @ b.T`` at the working dtype (fp8 through ``torch._scaled_mm``)."""
        if self.dtype_name == "fp8":
            one = self._one
            torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16, out=out)
        else:
            torch.matmul(a, b.t(), out=out)

    def step(self) -> StepResult:
        t0, t1, flop = self.sizer.step()
        return StepResult(t0, t1, (PartWork(self.name, flop, self.unit),))

    def verify(self) -> list[Verification]:
        """The last product against its reference, its operands against their seeds, and
        the fixed product's checksum against the one taken at setup."""
        if self.last is None:
            self.enqueue(1)
        assert self.last is not None
        i, j, o = self.last
        checks = [self.compare(self.ring[i], self.ring[j], self.outputs[o], self._rows_to_check())]
        changed = {k: self._changed_elements(k) for k in (i, j)}
        if any(changed.values()):
            where = ", ".join(f"operand {k} ({n} values)" for k, n in changed.items() if n)
            detail = f"{where} changed in memory since setup"
            checked = 2 * self.ring[i].numel()
            mismatched = sum(changed.values())
            checks.append(Verification(self.name, False, checked, mismatched, detail=detail))
        now = self._fixed_checksum()
        if now != self._checksum:
            detail = f"fixed-product checksum changed from {self._checksum} to {now}"
            checks.append(Verification(self.name, False, 1, 1, detail=detail))
        return checks

    def compare(
        self, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, where: range | None = None
    ) -> Verification:
        """Rows ``where`` (all by default) of ``out`` against ``a @ b.T`` recomputed in the
        reference precision, in row blocks so that the check holds little memory."""
        tol = TOLERANCES[self.dtype_name]
        ref_dtype = REFERENCE_DTYPES[self.dtype_name]
        rows = self._verify_rows()
        where = where if where is not None else range(a.shape[0])
        with torch.no_grad(), highest_precision():
            b_ref = b.to(ref_dtype)
            scale = self._result_scale(a, b_ref, rows)
            stats = _ErrorStats(self.device)
            for start in range(where.start, where.stop, rows):
                stop = min(start + rows, where.stop)
                ref = self._reference(a[start:stop].to(ref_dtype), b_ref)
                stats.add(out[start:stop].to(ref_dtype), ref, tol, scale)
        return stats.result(self.name, scale, tol.atol)

    def _rows_to_check(self) -> range:
        """Every row on a GPU; on a CPU the next CPU_VERIFY_ROWS, from the first row on."""
        if self.device.type == "cuda" or self.n <= CPU_VERIFY_ROWS:
            return range(self.n)
        start = self._row_cursor
        stop = min(self.n, start + CPU_VERIFY_ROWS)
        self._row_cursor = stop % self.n
        return range(start, stop)

    def _verify_rows(self) -> int:
        return min(self.n, max(1, VERIFY_BLOCK_ELEMENTS // self.n))

    def _reference(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        if self.dtype_name != "fp64":
            return a @ b.t()
        half = a.shape[1] // 2
        return a[:, :half] @ b[:, :half].t() + a[:, half:] @ b[:, half:].t()

    def _result_scale(self, a: torch.Tensor, b_ref: torch.Tensor, rows: int) -> float:
        """Expected RMS of ``a @ b.T`` for random operands: |A|·|B| / sqrt(m·n·k)."""
        sq = torch.zeros((), dtype=torch.float64, device=self.device)
        for start in range(0, a.shape[0], rows):
            sq += a[start : start + rows].to(torch.float64).square().sum()
        b_norm = torch.linalg.vector_norm(b_ref, dtype=torch.float64)
        m, k = a.shape
        value = float(sq.sqrt() * b_norm) / math.sqrt(m * b_ref.shape[0] * k)
        return value if value > 0 else 1.0

    def checksum(self) -> str | None:
        return self._checksum

    def describe(self) -> dict[str, Any]:
        mat_b = self.n * self.n * self.ring[0].element_size()
        return {
            "workload": self.name,
            "dtype": self.dtype_name,
            "dtype_reason": self.dtype_choice.reason,
            "n": self.n,
            "n_reason": self.size.reason,
            "n_rates_flop_s": {str(n): rate for n, rate in self.size.rates.items()},
            "ring": len(self.ring),
            "held_b": mat_b * len(self.ring),
            "flop_per_product": self.flop_per_product,
            "products_per_step": self.sizer.count,
            "checksum": self._checksum,
        }

    def close(self) -> None:
        self.ring.clear()
        self.outputs.clear()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def _choose_size(self) -> SizeChoice:
        """The asked side; on a GPU, CUDA_N; on a CPU, the fastest of CPU_SIZES that fit
        the memory share (the smallest where none does)."""
        if self.options.gemm_n is not None:
            n = _round_up(self.options.gemm_n, 16)
            return SizeChoice(n, "asked", {})
        if self.device.type == "cuda":
            return SizeChoice(CUDA_N, "measured best on an H200", {})
        budget = memory_budget_b(self.device, self.options)
        sides = [n for n in CPU_SIZES if self._least_held_b(n) <= budget] or [CPU_SIZES[0]]
        return fastest_size(sides, self._rate_at, CALIBRATE_S)

    def _least_held_b(self, n: int) -> int:
        """Bytes a ring of two operands and its two outputs take at side ``n``."""
        return 2 * n * n * (self.dtype.itemsize + self.out_dtype.itemsize)

    def _rate_at(self, n: int, seconds: float) -> tuple[float, float]:
        """FLOP/s of products at side ``n`` run back to back for what is left of ``seconds``
        after a first one (at least one), and how long that first product took. Every side
        is timed over a like span, so a busy host slows each alike rather than favouring the
        side whose short products found a quiet moment."""
        gen = torch.Generator(device=self.device).manual_seed(self.seed)
        a, b, out = self._random(n, gen), self._random(n, gen), self._empty_output(n)
        t_first = time.perf_counter()
        self.product(a, b, out)
        synchronize(self.device)
        t0 = time.perf_counter()
        first_s, count = t0 - t_first, 0
        while True:
            self.product(a, b, out)
            synchronize(self.device)
            count += 1
            now = time.perf_counter()
            if now - t_first >= seconds:
                return count * 2.0 * n**3 / max(now - t0, 1e-12), first_s

    def _make_ring(self) -> list[torch.Tensor]:
        count = self.options.gemm_ring or (
            self._ring_size() if self.device.type == "cuda" else CPU_RING
        )
        return [self._operand(k) for k in range(count)]

    def _operand(self, index: int) -> torch.Tensor:
        """Ring matrix ``index``, drawn from its own seed so that ``verify`` can draw it again."""
        gen = torch.Generator(device=self.device)
        gen.manual_seed(self.seed * 1_000_003 + index)
        return self._random(self.n, gen)

    def _changed_elements(self, index: int) -> int:
        """How many elements of ring matrix ``index`` differ, bit for bit, from its draw."""
        bits = INT_OF_SIZE[self.dtype.itemsize]
        return int((self.ring[index].view(bits) != self._operand(index).view(bits)).sum())

    def _ring_size(self) -> int:
        """As many operand matrices as the memory share holds after outputs and checks."""
        n2 = self.n * self.n
        mat_b = n2 * self.dtype.itemsize
        ref_b = REFERENCE_DTYPES[self.dtype_name].itemsize
        rows = self._verify_rows()
        reserve = 2 * n2 * self.out_dtype.itemsize + n2 * ref_b + 6 * rows * self.n * ref_b
        room = memory_budget_b(self.device, self.options) - reserve
        return max(2, min(MAX_RING, room // mat_b))

    def _random(self, n: int, gen: torch.Generator) -> torch.Tensor:
        if self.dtype_name == "fp8":
            x = torch.randn(n, n, device=self.device, dtype=torch.bfloat16, generator=gen)
            return x.to(torch.float8_e4m3fn)
        return torch.randn(n, n, device=self.device, dtype=self.dtype, generator=gen)

    def _empty_output(self, n: int) -> torch.Tensor:
        return torch.empty(n, n, device=self.device, dtype=self.out_dtype)

    def _fixed_operands(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Operands drawn on the host from a fixed seed, so every device gets the same bits."""
        n = min(self.n, FIXED_N.get(self.device.type, FIXED_N["cpu"]))
        gen = torch.Generator().manual_seed(FIXED_SEED)
        pair = [torch.randn(n, n, generator=gen).to(self.dtype) for _ in range(2)]
        return pair[0].to(self.device), pair[1].to(self.device)

    def _fixed_checksum(self) -> str:
        a, b = self._fixed
        out = self._empty_output(a.shape[0])
        self.product(a, b, out)
        data = out.cpu().contiguous().view(torch.uint8).numpy().tobytes()
        return hashlib.blake2b(data, digest_size=8).hexdigest()


class _ErrorStats:
    """Running error figures over the blocks of one comparison, kept on the device so the
    check syncs once."""

    def __init__(self, device: torch.device) -> None:
        zero = torch.zeros((), dtype=torch.float64, device=device)
        self.max_abs = zero.clone()
        self.mismatched = torch.zeros((), dtype=torch.int64, device=device)
        self.nonfinite = torch.zeros((), dtype=torch.int64, device=device)
        self.checked = 0

    def add(self, got: torch.Tensor, ref: torch.Tensor, tol: Tolerance, scale: float) -> None:
        err = (got - ref).abs()
        bound = ref.abs().mul_(tol.rtol).add_(tol.atol * scale)
        self.mismatched += (~(err <= bound)).sum()  # NaN compares false: a mismatch
        finite = torch.isfinite(err)
        self.nonfinite += (~finite).sum()
        self.max_abs = torch.maximum(self.max_abs, torch.where(finite, err, 0).max().double())
        self.checked += err.numel()

    def result(self, part: str, scale: float, atol: float) -> Verification:
        mismatched = int(self.mismatched.item())
        nonfinite = int(self.nonfinite.item())
        max_abs = float(self.max_abs.item())
        detail = f"{nonfinite} non-finite values" if nonfinite else ""
        return Verification(
            part=part,
            ok=mismatched == 0,
            checked=self.checked,
            mismatched=mismatched,
            max_abs_error=max_abs,
            max_rel_error=max_abs / scale,
            tolerance=atol,
            detail=detail,
        )


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple
