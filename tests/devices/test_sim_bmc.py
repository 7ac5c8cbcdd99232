"""The simulated server's BMC: the room air it breathes, as an IPMI inlet sensor reads it."""

from __future__ import annotations

from soak.bmc import ServerSensors
from soak.devices.sim import SimServer
from soak.devices.sim.bmc import SimBmc
from soak.devices.sim.params import IDEAL_CHASSIS


def test_the_inlet_fault_warms_the_inlet_sensor_and_a_local_hot_spot_does_not() -> None:
    cool = SimBmc(SimServer(gpus=2, seed=4, chassis=IDEAL_CHASSIS))
    warm = SimBmc(SimServer(gpus=2, seed=4, faults=["inlet:delta=6"], chassis=IDEAL_CHASSIS))
    spot = SimBmc(SimServer(gpus=2, seed=4, faults=["inlet:gpu=1:delta=6"], chassis=IDEAL_CHASSIS))
    inlet = {b: b.temperatures()[0].value_c for b in (cool, warm, spot)}
    assert inlet[warm] == inlet[cool] + 6.0
    assert inlet[spot] == inlet[cool]


def test_real_sensors_read_whole_degrees_and_the_probe_picks_the_inlet() -> None:
    sensors = ServerSensors(SimBmc(SimServer(gpus=2, seed=4)))
    assert sensors.probe.inlet_sensor == "Inlet Temp"
    readings = sensors.sample(0.0)
    assert readings[0].series == "inlet_c"
    assert readings[0].value is not None and readings[0].value == round(readings[0].value)
