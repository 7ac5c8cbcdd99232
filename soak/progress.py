"""The runner's frozen snapshot of a soak in progress (README.md, "Watching a soak").

The runner builds one ``Progress`` per tick, after the tick is stored, and hands it to its
watchers (the terminal view, the Prometheus exporter). Watchers read only this snapshot, never
the runner, so watching cannot slow or break measuring and a view is tested without a run.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from soak.model import Event, Telemetry


class Phase(enum.StrEnum):
    """Where the run is: the idle baseline before load, the load itself, or stopping."""

    BASELINE = "baseline"
    LOAD = "load"
    STOPPING = "stopping"


@dataclass(frozen=True, slots=True)
class Rate:
    """One workload part's latest measured rate on a device."""

    part: str
    rate: float  # work units per second
    unit: str  # the work unit ("FLOP", "B", "token"); the rate is that per second


@dataclass(frozen=True, slots=True)
class DeviceProgress:
    """One device at one tick. ``None`` is "not known yet" or "cannot be read"."""

    index: int
    name: str
    uuid: str | None
    telemetry: Telemetry | None  # the latest row read this run
    rates: tuple[Rate, ...] = ()
    # Each part's throughput over the cold window once it is over, and over the steady
    # window so far once equilibrium is dated: the analysis's own figures (LiveWork)
    cold: tuple[Rate, ...] = ()
    steady: tuple[Rate, ...] = ()
    work_start_s: float | None = None  # the device's first completed work (its load start)
    equilibrium_s: float | None = None  # once the online rule has confirmed it
    equilibrium_basis: str | None = None
    eta_s: float | None = None  # predicted seconds to equilibrium; 0 once reached
    lost: bool = False  # the backend reported the device lost
    failed: bool = False  # its load ended it (crash, hang, failed verification)
    frozen: bool = False  # its readings froze under load (soak.validity): they repeat, unread
    reads_xids: bool = False  # the backend reports XID events for it (capability probed)
    clock_label: str = "SM clock"  # DeviceInfo.clock_label: "clock" on a CPU

    @property
    def reached(self) -> bool:
        return self.equilibrium_s is not None


@dataclass(frozen=True, slots=True)
class Progress:
    """The whole run at one tick; times are seconds from the run's start (its t0)."""

    t_s: float
    phase: Phase
    backend: str
    workload: str
    host: str
    planned_s: float  # the load length asked for (--hours/--minutes)
    until_steady: bool
    load_start_s: float | None  # when the load was started (None during the baseline)
    running_since_s: float | None  # when every device had finished its first work
    devices: tuple[DeviceProgress, ...]
    events: tuple[Event, ...] = field(default=())  # what happened in this tick
    # the server's inlet air as the BMC last read it, °C; None: no BMC inlet, or that read failed
    inlet_c: float | None = None

    @property
    def load_elapsed_s(self) -> float | None:
        """Seconds of load counted towards ``planned_s`` (from when every device worked)."""
        return None if self.running_since_s is None else max(0.0, self.t_s - self.running_since_s)

    def device(self, index: int) -> DeviceProgress:
        return next(d for d in self.devices if d.index == index)


class Watcher(Protocol):
    """Something that watches a run: told each tick's snapshot, closed once at the end."""

    def update(self, progress: Progress) -> None: ...

    def close(self) -> None: ...


TickHook = Callable[[Progress], None]
