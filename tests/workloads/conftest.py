"""Shared fixtures: options small enough that every workload sets up in about a second."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip tests marked ``gpu`` where torch sees no CUDA device, and say so."""
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items:
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU; torch.cuda.is_available() is False")
    for item in gpu_items:
        item.add_marker(skip)
