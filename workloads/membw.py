"""membw: STREAM-style copy and triad over arrays far larger than any cache.

Three float32 arrays A, B, C hold integer values below 2^22, so every operation is exact
and one cycle returns them to where they began:

    C <- A          copy   (A = P, C = P)
    A <- C + s*B    triad  (A = P + sQ)
    C <- A - s*B    triad  (C = P)
    A <- C          copy   (A = P)

The patterns P and Q are drawn per block from seeds, so ``verify`` regenerates any block
and compares exactly: one wrong bit anywhere is a mismatch. Work is bytes read plus bytes
written (10 array-lengths per cycle), as STREAM counts it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from workloads.base import PartWork, StepResult, Verification, WorkloadOptions
from workloads.device import (
    GIB,
    MIB,
    StepSizer,
    last_level_cache_b,
    memory_budget_b,
    open_device,
)

SCALAR = 3.0  # s in the triads; |P + sQ| < 2^22 keeps float32 exact
PATTERN_BOUND = 1 << 20  # patterns are integers in [-2^20, 2^20)
BLOCK_ELEMENTS = 1 << 22  # elements per seeded pattern block (16 MiB)
CHUNK_BYTES = {"cuda": GIB}  # one kernel's share of an array on a GPU; CPU: the whole array
CPU_MIN_ARRAY_B = 64 * MIB
CPU_VERIFY_BLOCKS = 1  # blocks checked per verification on a CPU (all on a GPU)
BYTES_PER_CYCLE = 10  # array-lengths moved by one copy, triad, triad, copy
ELEMENT_B = 4  # float32


@dataclass(frozen=True, slots=True)
class _Block:
    """One seeded block: which chunk it lies in and where."""

    chunk: int
    start: int
    stop: int
    index: int  # position among all blocks: the pattern's seed offset


class MembwWorkload:
    """Copy and triad cycles over three arrays; reports bytes ("B")."""

    name = "membw"
    unit = "B"

    def __init__(self, options: WorkloadOptions) -> None:
        self.options = options
        self.a: list[torch.Tensor] = []
        self.b: list[torch.Tensor] = []
        self.c: list[torch.Tensor] = []
        self.blocks: list[_Block] = []
        self._cursor = 0
        self._verify_cursor = 0

    def setup(self, device: str, seed: int) -> None:
        self.device = open_device(device, self.options)
        self.seed = seed
        self.array_b = self.options.membw_bytes or self._default_array_b()
        elements = max(1, self.array_b // ELEMENT_B)
        chunk = max(1, CHUNK_BYTES.get(self.device.type, elements * ELEMENT_B) // ELEMENT_B)
        sizes = [min(chunk, elements - s) for s in range(0, elements, chunk)]
        self.blocks = _blocks(sizes)
        self.a = [self._empty(n) for n in sizes]
        self.b = [self._empty(n) for n in sizes]
        self.c = [self._empty(n) for n in sizes]
        for block in self.blocks:
            self._fill(block)
        self.bytes_per_unit = [BYTES_PER_CYCLE * n * ELEMENT_B for n in sizes]
        self.sizer = StepSizer(self.device, self.enqueue, self.options.step_s, calibrate_s=0.2)

    def enqueue(self, count: int) -> float:
        """Queue ``count`` cycles, each over the next chunk of the arrays; their bytes."""
        moved = 0.0
        for _ in range(count):
            k = self._cursor
            a, b, c = self.a[k], self.b[k], self.c[k]
            c.copy_(a)
            torch.add(c, b, alpha=SCALAR, out=a)
            torch.add(a, b, alpha=-SCALAR, out=c)
            a.copy_(c)
            moved += self.bytes_per_unit[k]
            self._cursor = (k + 1) % len(self.a)
        return moved

    def step(self) -> StepResult:
        t0, t1, moved = self.sizer.step()
        return StepResult(t0, t1, (PartWork(self.name, moved, self.unit),))

    def verify(self) -> list[Verification]:
        """Regenerate the patterns of the next blocks and compare all three arrays exactly
        (every block on a GPU; a rotating few on a CPU, where regenerating is slow)."""
        count = len(self.blocks) if self.device.type == "cuda" else CPU_VERIFY_BLOCKS
        mismatched = torch.zeros((), dtype=torch.int64, device=self.device)
        max_abs = torch.zeros((), dtype=torch.float32, device=self.device)
        checked = 0
        with torch.no_grad():
            for _ in range(min(count, len(self.blocks))):
                block = self.blocks[self._verify_cursor]
                self._verify_cursor = (self._verify_cursor + 1) % len(self.blocks)
                for got, want in self._expected(block):
                    # bit for bit: as floats, -0.0 == 0.0 would hide a flipped sign bit
                    mismatched += (got.view(torch.int32) != want.view(torch.int32)).sum()
                    err = (got - want).abs()
                    max_abs = torch.maximum(max_abs, torch.nan_to_num(err, posinf=0.0).max())
                    checked += got.numel()
        bad = int(mismatched.item())
        worst = float(max_abs.item())
        rms = PATTERN_BOUND / math.sqrt(3.0)
        return [Verification(self.name, bad == 0, checked, bad, worst, worst / rms, 0.0)]

    def checksum(self) -> str | None:
        return None

    def describe(self) -> dict[str, Any]:
        return {
            "workload": self.name,
            "array_b": self.array_b,
            "held_b": 3 * self.array_b,
            "chunk_b": self.a[0].numel() * ELEMENT_B,
            "chunks": len(self.a),
            "bytes_per_step": sum(self.bytes_per_unit) / len(self.a) * self.sizer.count,
            "cycles_per_step": self.sizer.count,
        }

    def close(self) -> None:
        for arrays in (self.a, self.b, self.c):
            arrays.clear()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def _default_array_b(self) -> int:
        """On a GPU, a third of the memory share less one block for checks; on a CPU, a
        quarter of the share but at least four last-level caches."""
        budget = memory_budget_b(self.device, self.options)
        if self.device.type == "cuda":
            return max(BLOCK_ELEMENTS * ELEMENT_B, (budget - BLOCK_ELEMENTS * ELEMENT_B) // 3)
        return max(budget // 4, 4 * last_level_cache_b(), CPU_MIN_ARRAY_B)

    def _empty(self, elements: int) -> torch.Tensor:
        return torch.empty(elements, dtype=torch.float32, device=self.device)

    def _fill(self, block: _Block) -> None:
        k, sl = block.chunk, slice(block.start, block.stop)
        self.a[k][sl] = self._pattern(block, 0)
        self.b[k][sl] = self._pattern(block, 1)
        self.c[k][sl] = self.a[k][sl]

    def _expected(self, block: _Block) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Each array's slice of the block with the pattern it must hold: P in A and C, Q
        in B (each pattern drawn once)."""
        k, sl = block.chunk, slice(block.start, block.stop)
        p, q = self._pattern(block, 0), self._pattern(block, 1)
        return [(self.a[k][sl], p), (self.b[k][sl], q), (self.c[k][sl], p)]

    def _pattern(self, block: _Block, which: int) -> torch.Tensor:
        gen = torch.Generator(device=self.device)
        gen.manual_seed((self.seed * 1_000_003 + block.index) * 2 + which)
        size = (block.stop - block.start,)
        return torch.randint(
            -PATTERN_BOUND,
            PATTERN_BOUND,
            size,
            generator=gen,
            device=self.device,
            dtype=torch.float32,
        )


def _blocks(chunk_sizes: list[int]) -> list[_Block]:
    """The seeded blocks that tile the chunks, in order."""
    blocks: list[_Block] = []
    for k, size in enumerate(chunk_sizes):
        for start in range(0, size, BLOCK_ELEMENTS):
            stop = min(size, start + BLOCK_ELEMENTS)
            blocks.append(_Block(k, start, stop, len(blocks)))
    return blocks
