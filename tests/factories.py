"""Builders shared by the tests: one place that knows what a simulated run's config needs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from soak.config import RunConfig

SIM_DEFAULTS: dict[str, Any] = {
    "backend": "sim",
    "workload": "gemm",
    "duration_s": 1800.0,
    "seed": 1,
    "baseline_s": 10.0,
}


def sim_config(out: Path, **overrides: Any) -> RunConfig:
    """A RunConfig for the simulated server writing under ``out``; ``overrides`` set any
    field (``sim_gpus=4``, ``sim_faults=(...)``)."""
    return RunConfig(**{**SIM_DEFAULTS, "out": out, **overrides})
