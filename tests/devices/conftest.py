"""What the backend tests share: per-GPU scenario tables over a healthy baseline, readings by
device, and backends closed at the end of each test."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest


def scenario_tables(
    baseline: Callable[[int], dict[str, Any]], changes: Mapping[int, Mapping[str, Any]], gpus: int
) -> list[dict[str, Any]]:
    """Every GPU's answer table: the healthy baseline, with one scenario's changes on top."""
    tables = [baseline(i) for i in range(gpus)]
    for gpu, answers in changes.items():
        tables[gpu].update(answers)
    return tables


def by_device(samples: list[Any]) -> dict[int, Any]:
    return {s.device: s for s in samples}


@pytest.fixture
def closing() -> Iterator[Callable[[Any], Any]]:
    """Hands back each backend given to it, and closes them all when the test ends."""
    opened: list[Any] = []

    def keep(backend: Any) -> Any:
        opened.append(backend)
        return backend

    yield keep
    for backend in opened:
        backend.close()
