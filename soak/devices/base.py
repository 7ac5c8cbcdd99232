"""The small contract every telemetry backend and every load source keeps.

A backend (``nvml``, ``amd``, ``cpu``, ``sim``) discovers devices, probes their
capabilities once, and reads one telemetry snapshot per device per tick. A load source
runs the workload on those devices and hands back work samples and events: for real
backends that is the worker pool (``soak.worker``), for the simulated server the server
itself, because its throughput follows its own simulated clocks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from soak.model import Capability, DeviceInfo, Event, ServerStep, SyncStep, Telemetry, WorkSample
from soak.record import DdpGroup


@dataclass(frozen=True, slots=True)
class LoadUpdate:
    samples: list[WorkSample] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    sync_steps: list[SyncStep] = field(default_factory=list)  # ddp: per device and step
    server_steps: list[ServerStep] = field(default_factory=list)  # ddp: once per step


class Load(Protocol):
    """The workload running on the devices."""

    def start(self, t0: float) -> DdpGroup | None:
        """Start load on every device; ``t0`` is the run's zero on the run's clock. Returns
        the multi-node ddp group this node's ranks joined, for the run record; None where
        the load is a group of its own."""
        ...

    def poll(self, t_s: float) -> LoadUpdate:
        """Work finished and events seen since the last poll; never blocks for long."""
        ...

    def stop(self, t_s: float) -> LoadUpdate:
        """Stop every device's load, wait (bounded) for it to end, return what is left."""
        ...

    def kill(self, t_s: float) -> LoadUpdate:
        """Stop at once (a second Ctrl-C, a crash of the coordinator's loop): end every
        device's load without waiting for it to finish its step; return what is left."""
        ...

    def failed_devices(self) -> frozenset[int]:
        """Devices whose load ended abnormally (crash, hang, lost, verification)."""
        ...


class Backend(Protocol):
    """A source of devices and telemetry."""

    name: str

    def devices(self) -> list[DeviceInfo]:
        """Inventory, read once per run."""
        ...

    def capabilities(self) -> dict[int, dict[str, Capability]]:
        """Per device, per telemetry metric (``Telemetry`` field name): readable or why not."""
        ...

    def sample(self, t_s: float) -> list[Telemetry]:
        """One snapshot per device that still answers. A device that stops answering is
        reported once as a DEVICE_LOST event from ``poll_events`` and then left out."""
        ...

    def poll_events(self, t_s: float) -> list[Event]:
        """Events seen since the last call: XIDs, ECC, lost devices, injected faults."""
        ...

    def simulated_load(self, workload: str) -> Load | None:
        """The load source when the backend simulates its own load (``sim``), else None:
        the runner then starts real workers on each device's ``torch_device``."""
        ...

    def close(self) -> None: ...


BACKEND_NAMES = ("auto", "nvml", "amd", "cpu", "sim")
WORKLOAD_NAMES = ("gemm", "membw", "train", "mix", "ddp")
