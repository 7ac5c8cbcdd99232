"""Builders shared by the tests: one place that knows what a simulated run's config needs."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from soak.config import RunConfig
from soak.profile import Profile

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


def any_length(profile: Profile | None = None) -> Profile:
    """``profile`` (the default one) judging a load of any length (``min_load_s`` 0): for a
    test of a few simulated minutes about something else than whether they are enough."""
    profile = profile or Profile()
    return dataclasses.replace(profile, checks=dataclasses.replace(profile.checks, min_load_s=0.0))
