"""The simulated server's BMC: its inlet and exhaust air as a BMC's temperature sensors
report them, so that a simulated run reads its inlet through the same probe, sampling,
store and model as a real one (``soak.bmc``).

The inlet sensor sees the room air the server breathes (the slow drift, and an
``inlet:delta=`` fault that warms every GPU's air); a fault on one GPU's air is a local hot
spot it does not see. Readings are whole °C, as IPMI sensors give them, after the chassis'
sensor noise (none with ideal sensors, which are exact).
"""

from __future__ import annotations

import numpy as np

from soak.bmc.base import Sensor
from soak.devices.sim.params import IDEAL_CHASSIS
from soak.devices.sim.server import SimServer

INLET_ENTITY = 55  # IPMI entity ID 0x37: air inlet
EXHAUST_ENTITY = 7  # system board
# [assumed] exhaust air above inlet per watt the accelerators dissipate: ~15 K at 8 x 700 W.
EXHAUST_K_PER_W = 0.0027


class SimBmc:
    """The BMC of one ``SimServer``: read at the server's present time."""

    def __init__(self, server: SimServer) -> None:
        self.server = server
        self.source = "simulated BMC"
        self._rng = np.random.default_rng([server.seed, 0xB3C])
        self._ideal = server.chassis == IDEAL_CHASSIS

    def inlet_c(self) -> float:
        """The room air at the server's inlet now, exact (the truth for benchmarks)."""
        p = self.server.physics
        return p.inlet_c(self.server.now_s, fans=False) + float(np.min(p.inlet_delta))

    def temperatures(self) -> list[Sensor]:
        p = self.server.physics
        inlet = self.inlet_c()
        exhaust = inlet + EXHAUST_K_PER_W * float(np.sum(p.power_w))
        noise = self._rng.standard_normal(2) * self.server.chassis.temp_noise_c
        if not self._ideal:
            inlet, exhaust = (
                float(np.rint(v + n)) for v, n in zip((inlet, exhaust), noise, strict=True)
            )
        return [
            Sensor("Inlet Temp", inlet, INLET_ENTITY),
            Sensor("Exhaust Temp", exhaust, EXHAUST_ENTITY),
        ]

    def close(self) -> None:
        """Nothing to release."""
