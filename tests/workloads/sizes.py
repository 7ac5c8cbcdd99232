"""Sizes and set-up shared by the workload tests: small enough that setup takes about a
second."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TypeVar

from workloads import Workload, WorkloadOptions

W = TypeVar("W", bound=Workload)

TINY_TRAIN = {
    "train_batch": 4,
    "train_seq": 32,
    "train_width": 64,
    "train_layers": 2,
    "train_heads": 2,
    "train_vocab": 256,
}


def on_cpu(
    cls: Callable[[WorkloadOptions], W], options: WorkloadOptions, seed: int = 0, **changes: object
) -> W:
    """A workload of class ``cls`` set up on the CPU, with ``options`` changed by keyword."""
    workload = cls(dataclasses.replace(options, **changes))
    workload.setup("cpu", seed)
    return workload
