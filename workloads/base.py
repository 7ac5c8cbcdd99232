"""The contract every workload keeps, and the options that size it.

This module imports neither torch nor anything of ``soak``: the coordinator reads
``WorkloadOptions`` without paying for torch, and a worker process can import it before
its device's environment (``CUDA_VISIBLE_DEVICES``, thread counts) is in place.
"""

from __future__ import annotations

import math
import typing
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from typing import Any, Protocol

DTYPE_NAMES = ("bf16", "fp16", "tf32", "fp32", "fp64", "fp8")
"""Matrix dtypes the GEMM workload accepts; ``fp8`` is e4m3 with bf16 output."""


TEST_ONLY = {"test_only": True}  # a field's metadata: set by tests, never by ``--option``


class OptionError(ValueError):
    """A workload option given as text that names no field or does not fit its type; the
    message starts with the key ("gemm_n: 'x' is not a whole number")."""


@dataclass(frozen=True, slots=True)
class WorkloadOptions:
    """How big and how long: one field per command-line flag; ``None`` means "size it to
    the device". Bad values raise ``ValueError`` naming the field."""

    # GEMM dtype (DTYPE_NAMES); None: bf16 (fp16) on GPU, bf16 on a CPU with AMX-BF16 or
    # AVX512-BF16, fp32 on other CPUs
    dtype: str | None = None
    mem_fraction: float = 0.5  # share of device memory (CPU: of MemAvailable, capped) to hold
    mem_bytes: int | None = None  # bytes to hold; overrides mem_fraction
    step_s: float = 1.0  # target length of one timed step, seconds
    verify_interval_s: float = 10.0  # seconds of work between result verifications
    # matrix side (m = n = k); None: 12288 on GPU, on CPU the fastest of 1024-4096 timed at setup
    gemm_n: int | None = None
    gemm_ring: int | None = (
        None  # operand matrices rotated; None: as many as the memory share holds
    )
    membw_bytes: int | None = (
        None  # bytes of each of the three STREAM arrays; None: from memory share
    )
    train_batch: int | None = None  # sequences per training step
    train_seq: int | None = None  # tokens per sequence (context length)
    train_width: int | None = None  # model width (embedding dimension)
    train_layers: int | None = None  # transformer blocks
    train_heads: int | None = None  # attention heads per block
    train_vocab: int | None = None  # vocabulary size of the synthetic token stream
    train_loader_workers: int | None = None  # DataLoader worker processes feeding the model
    cpu_threads: int | None = None  # torch intra-op threads on a CPU device; None: torch default
    dist_backend: str | None = None  # ddp: gloo, nccl (RCCL on ROCm); None: by device
    ddp_allreduce_mib: float | None = None  # ddp: timed all-reduce buffer; None: 256 GPU, 4 CPU
    ddp_allreduce_every: int = 1  # ddp: time the buffer's all-reduce every this many steps
    # Faults the tests inject (never an operator's: ``--option`` does not take them).
    # ddp: this rank's parameters drift (the ddp checksum must see it)
    ddp_perturb_rank: int | None = field(default=None, metadata=TEST_ONLY)
    # ddp: this rank is a straggler, slower in its compute by ``ddp_slowdown``
    ddp_slow_rank: int | None = field(default=None, metadata=TEST_ONLY)
    # ddp: the slow rank idles this many calibrated iterations more in each one, before its
    # gradient all-reduce
    ddp_slowdown: float = field(default=0.5, metadata=TEST_ONLY)
    mix_sync: bool = False  # mix on 2+ devices: its training runs as lock-step ddp (docs/ddp.md)

    @classmethod
    def typed(cls, pairs: Iterable[tuple[str, str]]) -> dict[str, object]:
        """``KEY=VALUE`` texts (the command line's --option) as field values, each typed by
        its field's annotation (``gemm_n: int | None`` takes a whole number, "4e9" too);
        raises OptionError naming the key, or for values the options then refuse."""
        hidden = {f.name for f in fields(cls) if f.metadata.get("test_only")}
        hints = {k: v for k, v in typing.get_type_hints(cls).items() if k not in hidden}
        out: dict[str, object] = {}
        for key, text in pairs:
            if key not in hints:
                raise OptionError(f"{key}: unknown (known: {', '.join(sorted(hints))})")
            out[key] = _typed(key, text, set(typing.get_args(hints[key])) or {hints[key]})
        try:
            cls(**out)
        except (TypeError, ValueError) as exc:
            raise OptionError(f"{exc}") from None
        return out

    def __post_init__(self) -> None:
        if self.dtype is not None and self.dtype not in DTYPE_NAMES:
            raise ValueError(f"dtype: {self.dtype!r} is not one of {', '.join(DTYPE_NAMES)}")
        if not 0.0 < self.mem_fraction <= 0.95:
            raise ValueError(f"mem_fraction: {self.mem_fraction} is not in (0, 0.95]")
        for name in ("step_s", "verify_interval_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name}: {value} is not a positive number of seconds")
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in _POSITIVE_INTS and value is not None and value < _POSITIVE_INTS[f.name]:
                raise ValueError(f"{f.name}: {value} is below {_POSITIVE_INTS[f.name]}")


_POSITIVE_INTS = {
    "mem_bytes": 1,
    "gemm_n": 16,
    "gemm_ring": 2,
    "membw_bytes": 4096,
    "train_batch": 1,
    "train_seq": 2,
    "train_width": 8,
    "train_layers": 1,
    "train_heads": 1,
    "train_vocab": 4,
    "train_loader_workers": 0,
    "cpu_threads": 1,
    "ddp_allreduce_every": 1,
    "ddp_perturb_rank": 0,
    "ddp_slow_rank": 0,
}


@dataclass(frozen=True, slots=True)
class PartWork:
    """Work of one part of a workload finished in one step, e.g. 3.2e15 "FLOP" of "gemm"."""

    part: str
    work: float
    unit: str  # "FLOP", "B", "token"
    # The part's own time.monotonic() span inside the step, where it ran alone (mix on a
    # CPU); None: the step's span, shared with any other part.
    t_start: float | None = None
    t_end: float | None = None


@dataclass(frozen=True, slots=True)
class Verification:
    """One check of a part's results against a reference.

    ``mismatched`` counts the checked values outside the tolerance (NaN and Inf always
    are); ``max_rel_error`` is the largest error over the result's natural scale (the RMS
    of the reference), so it reads the same at any size.
    """

    part: str
    ok: bool
    checked: int
    mismatched: int
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    tolerance: float | None = None  # on the max_rel_error scale, where one number says it
    detail: str = ""


@dataclass(frozen=True, slots=True)
class SyncTiming:
    """One synchronous (ddp) step seen from one rank: its compute and collective wait,
    summed over the step's iterations, and what every rank shared at its end."""

    rank: int
    ranks: int
    iterations: int
    samples: int  # sequences the whole group trained on in this step
    # forward, backward until the last gradient bucket, optimizer (mix: all its parts' time
    # at work, the training's wait left out)
    compute_s: float
    wait_s: float  # in the gradient all-reduce after the last bucket was ready
    step_s: float  # the iterations, start to finish (compute + wait)
    straggler: int  # the rank with the longest compute_s this step
    rank_compute_s: tuple[float, ...]  # every rank's compute_s, by rank
    allreduce_b: int | None = None  # bytes of the timed all-reduce; None: not timed this step
    allreduce_s: float | None = None


@dataclass(frozen=True, slots=True)
class StepResult:
    """One timed step: ``time.monotonic()`` at its start and at its end (device work
    finished), the work per part, and any check that ran inside the step."""

    t_start: float
    t_end: float
    parts: tuple[PartWork, ...]
    verifications: tuple[Verification, ...] = ()
    sync: SyncTiming | None = None  # synchronous workloads (ddp) only


class Workload(Protocol):
    """A load generator on one device. Constructed from options (cheap), then ``setup``
    allocates and calibrates, ``step`` runs one timed step, ``verify`` checks results."""

    name: str

    def setup(self, device: str, seed: int) -> None:
        """Allocate on ``device`` (a torch device string) and size a step to ``step_s``."""
        ...

    def step(self) -> StepResult:
        """Run one timed step and return when the device has finished it."""
        ...

    def verify(self) -> list[Verification]:
        """Recompute a recent result in a reference precision and compare; one entry per
        part checked."""
        ...

    def checksum(self) -> str | None:
        """Hash of a fixed, seeded result, equal on devices of the same kind; None where the
        workload has none."""
        ...

    def describe(self) -> dict[str, Any]:
        """What was set up (dtype, sizes, per-unit figures), JSON-serialisable."""
        ...

    def close(self) -> None:
        """Release the device and any helper processes."""
        ...


def _typed(key: str, text: str, kinds: set[object]) -> object:
    """``text`` as the first of bool, int, float, str that the field takes."""
    if bool in kinds:
        if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
            raise OptionError(f"{key}: {text!r} is not true or false")
        return text.lower() in ("true", "1", "yes")
    if int in kinds:
        try:
            return int(text)
        except ValueError:
            try:
                value = float(text)  # 4e9 bytes
            except ValueError:
                value = math.nan
            if not value.is_integer():
                raise OptionError(f"{key}: {text!r} is not a whole number") from None
            return int(value)
    if float in kinds:
        try:
            return float(text)
        except ValueError:
            raise OptionError(f"{key}: {text!r} is not a number") from None
    return text
