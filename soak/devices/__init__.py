"""Telemetry backends behind one protocol, and the factory that picks one.

This package imports nothing from ``cli``, ``report`` or ``workloads``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from soak.devices.base import BACKEND_NAMES, Backend
from soak.errors import BackendUnavailable, ConfigError

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class BackendOptions:
    """What the factory needs to open any backend."""

    devices: tuple[int, ...] | None = None  # None: every device found
    sim_gpus: int = 8
    sim_sku: str = "h100-sxm"
    sim_faults: tuple[str, ...] = ()
    sim_sensors: str = "real"  # "real" or "ideal" (soak.devices.sim.params.SENSORS)
    seed: int = 0
    cpu_ranks: int = 1  # the CPU backend shows this many devices (ddp ranks) on one CPU


def open_backend(name: str, options: BackendOptions | None = None) -> Backend:
    """Open the named backend; ``auto`` tries NVIDIA, then AMD, then the CPU and says which
    it chose. Raises BackendUnavailable with a one-line reason when it cannot."""
    options = options or BackendOptions()
    if name not in BACKEND_NAMES:
        choices = ", ".join(BACKEND_NAMES)
        raise ConfigError(f"--backend: unknown backend {name!r} (choose from {choices})")
    if name == "auto":
        reasons: list[str] = []
        for candidate in ("nvml", "amd", "cpu"):
            try:
                backend = open_backend(candidate, options)
            except BackendUnavailable as exc:
                reasons.append(f"{candidate}: {exc}")
                continue
            log.info("backend auto: chose %s (%s)", candidate, "; ".join(reasons) or "first found")
            return backend
        raise BackendUnavailable("no backend found: " + "; ".join(reasons))
    if name == "sim":
        from soak.devices.sim import SimServer
        from soak.devices.sim.params import SENSORS

        if options.sim_sensors not in SENSORS:
            choices = ", ".join(SENSORS)
            raise ConfigError(
                f"sim sensors: unknown {options.sim_sensors!r} (choose from {choices})"
            )
        return SimServer(
            gpus=options.sim_gpus,
            sku=options.sim_sku,
            faults=options.sim_faults,
            seed=options.seed,
            devices=options.devices,
            chassis=SENSORS[options.sim_sensors],
        )
    if name == "nvml":
        from soak.devices.nvml import NvmlBackend

        return NvmlBackend(devices=options.devices)
    if name == "amd":
        from soak.devices.amd import AmdBackend

        return AmdBackend(devices=options.devices)
    from soak.devices.cpu import CpuBackend

    return CpuBackend(devices=options.devices, ranks=options.cpu_ranks)
