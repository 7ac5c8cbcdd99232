"""The simulator's ``sw-thermal`` fault: SW thermal slowdown as the driver does it (issue 39).
Held at its max operating temperature, the clock alternates sub-second between its floor
and its maximum, so 1-s reads have a mean far below the maximum and scatter by 300-400 MHz
(a real 8-GPU node swung between 210 and 1410 MHz from one read to the next)."""

from __future__ import annotations

import numpy as np
import pytest

from soak.devices.sim import SKUS, parse_fault
from soak.devices.sim.faults import swung_clock
from soak.model import ClockReason
from testkit.sim import BASELINE_S, simulate


def test_a_node_held_by_sw_thermal_slowdown_reads_a_swinging_clock():
    run = simulate(seed=2, faults=("sw-thermal",), gpus=2, workload="gemm", duration_s=900.0)
    sku = SKUS["h100-sxm"]
    for tele in run.data.telemetry.values():
        late = tele.t_s > BASELINE_S + 600.0
        clock, temp = tele.sm_clock_mhz[late], tele.temp_c[late]
        reasons = tele.clock_reasons[late].astype(np.int64)
        assert np.mean((reasons & int(ClockReason.SW_THERMAL)) != 0) > 0.99
        assert np.median(temp) == pytest.approx(sku.max_operating_temp_c, abs=1.0)
        assert 300.0 <= np.std(clock) <= 400.0
        assert np.mean(clock) < 0.75 * sku.max_sm_clock_mhz
        assert clock.min() == sku.idle_sm_clock_mhz or clock.max() == sku.max_sm_clock_mhz


def test_the_swinging_reads_average_to_the_governors_clock():
    rng = np.random.default_rng(0)
    reads = swung_clock(np.full(20000, 1200.0), 345.0, 1980.0, rng)
    assert np.mean(reads) == pytest.approx(1200.0, rel=0.01)
    assert set(np.unique(reads)) <= {345.0 + 327.0 * k for k in range(6)}


def test_the_fault_takes_one_gpu_or_every_gpu_and_a_factor():
    every = parse_fault("sw-thermal")
    assert (every.gpu, every.factor) == (None, 3.0)
    one = parse_fault("sw-thermal:gpu=2:factor=2.5")
    assert (one.gpu, one.factor) == (2, 2.5)
