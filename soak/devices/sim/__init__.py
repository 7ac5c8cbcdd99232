"""The simulated server (``--backend sim``): N accelerators of one SKU in one chassis.

A real backend, not a test mock. Per device and vectorised over devices:

- a two-node thermal RC network (die -> heat sink -> air) integrated exactly with the
  matrix exponential over each substep, plus an HBM node that lags the die and heat sink;
- chassis air: a slowly drifting inlet temperature, a small chassis-fan cycle, and
  **neighbour heating**: the server has two rows of GPUs in the airflow, the front row
  ``0 .. ceil(N/2)-1`` and the rear row after it; rear GPU ``i`` breathes the exhaust of
  front GPU ``i - ceil(N/2)``, warmed by that GPU's heat flow into its air;
- power = board base + memory + dynamic ``C V(f)^2 f`` + leakage rising exponentially with
  die temperature; a DVFS governor picks the highest clock whose power fits under the
  enforced limit and under the thermal limit near the max-operating temperature, and
  sets NVML's clock-event reason bits as it goes; HW slowdown, power brake and HW thermal
  halve the clocks;
- throughput proportional to the SM clock (GEMM) or the memory clock (memory bandwidth),
  quantised noisy sensors, ECC/XID/verification faults.

Deterministic for a seed and a tick schedule: every random number comes from per-device
``numpy`` generators spawned from the seed. Times are seconds on the run's clock; faults
with ``at=`` count from the load's start.

Modules: ``params`` (the SKU, workload and chassis tables), ``faults`` (``--sim-fault``
parsing), ``streams`` (random numbers from the seed), ``physics`` (the devices' state and
one exact step of it), ``server`` (the ``Backend``: time, faults applied, sensor readings)
and ``load`` (the work the devices do, driven through the server's public methods).
"""

from soak.devices.sim.faults import FAULT_KINDS, Fault, parse_fault
from soak.devices.sim.load import SimLoad
from soak.devices.sim.params import SKUS
from soak.devices.sim.server import SimServer

__all__ = ["FAULT_KINDS", "SKUS", "Fault", "SimLoad", "SimServer", "parse_fault"]
