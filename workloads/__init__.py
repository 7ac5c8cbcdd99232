"""Load generators for soak: one module per workload behind one protocol (``base``).

Imports torch and numpy only, nothing of ``soak``. The registry builds workloads lazily so
that importing this package does not import torch: a worker process must set its device's
environment before torch loads.
"""

from __future__ import annotations

from collections.abc import Callable

from workloads.base import (
    DTYPE_NAMES,
    PartWork,
    StepResult,
    Verification,
    Workload,
    WorkloadOptions,
)

WorkloadFactory = Callable[[WorkloadOptions], Workload]


def _gemm(options: WorkloadOptions) -> Workload:
    from workloads.gemm import GemmWorkload

    return GemmWorkload(options)


def _membw(options: WorkloadOptions) -> Workload:
    from workloads.membw import MembwWorkload

    return MembwWorkload(options)


def _train(options: WorkloadOptions) -> Workload:
    from workloads.train import TrainWorkload

    return TrainWorkload(options)


def _mix(options: WorkloadOptions) -> Workload:
    from workloads.mix import MixWorkload

    return MixWorkload(options)


def _ddp(options: WorkloadOptions) -> Workload:
    from workloads.ddp import DdpWorkload

    return DdpWorkload(options)


WORKLOADS: dict[str, WorkloadFactory] = {
    "gemm": _gemm,
    "membw": _membw,
    "train": _train,
    "mix": _mix,
    "ddp": _ddp,
}

__all__ = [
    "DTYPE_NAMES",
    "WORKLOADS",
    "PartWork",
    "StepResult",
    "Verification",
    "Workload",
    "WorkloadFactory",
    "WorkloadOptions",
]
