"""What every BMC reader shares: a temperature sensor as a BMC lists it, the choice of the
inlet among them, and the server-level sampling the runner drives.

A BMC is read for the server, not a device: its readings land in the store's
``server_readings`` table as named series (``soak.model.ServerReading``). The inlet sensor is
chosen once, at the probe, by entity (IPMI's *air inlet*, Redfish's ``Intake``) and then by
name (``Inlet``, ``Intake``, ``Ambient``), or named by the operator (``--bmc-inlet-sensor``).
A BMC that cannot give an inlet is one line at the start ("inlet not available: ..."), and
the soak goes on without headroom.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from soak.errors import BmcUnavailable, ConfigError
from soak.model import CHASSIS_SERIES, INLET_SERIES, Capability, ServerReading
from soak.record import BmcProbe

log = logging.getLogger(__name__)

# Every 10 s is enough: an inlet moves over minutes, and a BMC answers slowly (an IPMI SDR
# walk takes about a second); reading it each tick would slow the tick.
BMC_INTERVAL_S = 10.0

# Names that say a sensor measures the air coming into the server, best first.
INLET_NAMES = ("inlet", "intake", "ambient")
INLET_CONTEXTS = ("intake",)  # Redfish PhysicalContext, lower case
INLET_ENTITIES = (55, 64)  # IPMI entity IDs: 0x37 air inlet, 0x40 air inlet (DCMI)


@dataclass(frozen=True, slots=True)
class Sensor:
    """One temperature sensor as the BMC lists it; ``value_c`` None where it has no reading."""

    name: str
    value_c: float | None
    entity: int | None = None  # IPMI entity ID
    context: str | None = None  # Redfish PhysicalContext


class Bmc(Protocol):
    """One way to reach a BMC."""

    source: str  # what the report names: "ipmitool (in-band)", "redfish https://host"

    def temperatures(self) -> list[Sensor]:
        """Every temperature sensor now. Raises BmcUnavailable (login refused, timeout)."""
        ...

    def close(self) -> None: ...


def choose_inlet(sensors: Sequence[Sensor], name: str | None = None) -> Sensor:
    """The inlet among ``sensors``: the one named ``name`` (ConfigError, listing the sensors
    found, where none is), else by entity or physical context, else by name."""
    found = ", ".join(repr(s.name) for s in sensors) or "none"
    if name is not None:
        for s in sensors:
            if s.name == name:
                return s
        raise ConfigError(f"--bmc-inlet-sensor: no sensor named {name!r} (found: {found})")
    by_kind = [
        s
        for s in sensors
        if s.entity in INLET_ENTITIES or (s.context or "").lower() in INLET_CONTEXTS
    ]
    for word in INLET_NAMES:
        by_name = [s for s in sensors if re.search(word, s.name, re.IGNORECASE)]
        for group in ([s for s in by_kind if s in by_name], by_name):
            if group:
                return group[0]
    if by_kind:
        return by_kind[0]
    raise BmcUnavailable(f"no inlet sensor among the BMC's temperature sensors (found: {found})")


class ServerSensors:
    """The server-level readings of a run: the BMC probed once, then read every
    ``BMC_INTERVAL_S`` (a failed read is one missing reading, logged once).

    A real BMC answers in a second or, when it stops answering, only at its timeout: with
    ``background`` each read runs in a thread of its own and the tick that finds it done
    stores it, dated when it was asked for, so a slow BMC never delays a tick. The
    simulator's BMC is read in place (its clock is the run's)."""

    def __init__(
        self,
        bmc: Bmc,
        inlet_sensor: str | None = None,
        interval_s: float = BMC_INTERVAL_S,
        background: bool = False,
    ) -> None:
        self.bmc = bmc
        self.interval_s = interval_s
        self.background = background
        self._next_s = 0.0
        self._failed_once = False
        self._pending: tuple[float, threading.Thread, list] | None = None
        self.probe = self._probe(inlet_sensor)

    def _probe(self, name: str | None) -> BmcProbe:
        try:
            sensors = self.bmc.temperatures()
        except BmcUnavailable as exc:
            return BmcProbe(self.bmc.source, Capability.NOT_SUPPORTED, reason=str(exc))
        names = tuple(s.name for s in sensors)
        try:
            inlet = choose_inlet(sensors, name)
        except BmcUnavailable as exc:
            return BmcProbe(self.bmc.source, Capability.NOT_SUPPORTED, None, names, str(exc))
        if inlet.value_c is None:
            reason = f"the inlet sensor {inlet.name!r} has no reading"
            return BmcProbe(self.bmc.source, Capability.NOT_SUPPORTED, inlet.name, names, reason)
        return BmcProbe(self.bmc.source, Capability.SUPPORTED, inlet.name, names)

    @property
    def available(self) -> bool:
        return self.probe.capability is Capability.SUPPORTED

    def sample(self, t_s: float) -> list[ServerReading]:
        """The readings done by ``t_s`` (none between two reads, none without an inlet)."""
        if not self.available:
            return []
        if not self.background:
            if t_s < self._next_s:
                return []
            self._next_s = t_s + self.interval_s
            return self._readings(t_s, self._read())
        out: list[ServerReading] = []
        if self._pending is not None and not self._pending[1].is_alive():
            asked, _, result = self._pending
            self._pending = None
            out = self._readings(asked, result[0])
        if self._pending is None and t_s >= self._next_s:
            self._next_s = t_s + self.interval_s
            result: list = [None]
            thread = threading.Thread(
                target=lambda: result.__setitem__(0, self._read()), name="soak-bmc", daemon=True
            )
            thread.start()
            self._pending = (t_s, thread, result)
        return out

    def _read(self) -> list[Sensor] | None:
        try:
            return self.bmc.temperatures()
        except BmcUnavailable as exc:
            if not self._failed_once:
                log.warning("BMC read failed (logged once): %s", exc)
                self._failed_once = True
            return None

    def _readings(self, t_s: float, sensors: list[Sensor] | None) -> list[ServerReading]:
        if sensors is None:
            return [ServerReading(t_s, INLET_SERIES, None)]
        out = []
        inlet = None
        for s in sensors:
            if s.name == self.probe.inlet_sensor:
                inlet = s.value_c
            else:
                out.append(ServerReading(t_s, CHASSIS_SERIES + s.name, s.value_c))
        return [ServerReading(t_s, INLET_SERIES, inlet), *out]

    def close(self) -> None:
        """Wait (bounded) for a read in flight, then let the BMC go."""
        if self._pending is not None:
            self._pending[1].join(timeout=20.0)
        self.bmc.close()
