"""The simulated servers the benches judge: healthy groups (every SKU in rooms 5 °C cooler to
7 °C warmer than nominal) and each fault kind at several severities, with the per-seed draws
of the faulted GPU and a timed fault's start and length. Shared by
``bench/verdict_accuracy.py`` and ``bench/time_to_verdict.py`` (benches and tests do not
import each other)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from soak.validity import FROZEN_S


@dataclass(frozen=True)
class Case:
    """One fault at one severity; ``{gpu}`` in the spec is drawn per seed."""

    kind: str
    spec: str
    expect: str  # the diagnosis a FAIL should carry
    clear: bool  # a clear fault: the goal is to catch it in every seed
    goal: float | None = None  # detection goal where it is not 1.0
    flag: str | None = None  # a check whose warning also counts as flagging it
    seeds: str = "faults"  # which seed count it runs with: "faults" or "seeds" (the goal's)
    # a telemetry fault: the episode (soak.validity) that must name it at its time; caught
    # when named (and, for a freeze, when the device FAILs)
    named: str | None = None

    @property
    def label(self) -> str:
        return self.spec.replace(":gpu={gpu}", "")


CASES = (
    # The airflow faults add the sink resistance they added before issue 40 (0.018, 0.043
    # and 0.072 K/W to the H100's then assumed 0.036): to its measured 0.027 K/W.
    Case("airflow", "airflow:gpu={gpu}:factor=1.7", "thermal-limited", False),
    Case("airflow", "airflow:gpu={gpu}:factor=2.6", "thermal-limited", True),
    Case("airflow", "airflow:gpu={gpu}:factor=3.7", "thermal-limited", True),
    Case("power-cap", "power-cap:gpu={gpu}:watts=600", "power-limited", True),
    Case("power-cap", "power-cap:gpu={gpu}:watts=450", "power-limited", True),
    Case("sdc", "sdc:gpu={gpu}:rate=0.01", "hardware-fault", True),
    Case("sdc", "sdc:gpu={gpu}:rate=0.001", "hardware-fault", False),
    Case("stall", "stall:gpu={gpu}:fraction=0.1", "host-bound", True),
    Case("stall", "stall:gpu={gpu}:fraction=0.3", "host-bound", True),
    Case("slow", "slow:gpu={gpu}:factor=0.97", "hardware-fault", False),
    Case("slow", "slow:gpu={gpu}:factor=0.93", "hardware-fault", True, 0.99, seeds="seeds"),
    Case("slow", "slow:gpu={gpu}:factor=0.85", "hardware-fault", True),
    Case("leaky", "leaky:gpu={gpu}:factor=1.5", "power-limited", False),
    Case("leaky", "leaky:gpu={gpu}:factor=2", "power-limited", True),
    Case("leaky", "leaky:gpu={gpu}:factor=3", "power-limited", True),
    # Timed faults at a random time and length per seed (``{at}``, ``{for}``): anywhere in the
    # run, a few inside the warm-up, where a protection event must warn rather than fail.
    Case(
        "hw-slowdown",
        "hw-slowdown:gpu={gpu}:at={at}:for={for}",
        "hardware-fault",
        True,
        flag="hw_events",  # inside the warm-up it must warn
        seeds="seeds",
    ),
    Case(
        "power-brake",
        "power-brake:gpu={gpu}:at={at}:for={for}",
        "hardware-fault",
        True,
        flag="hw_events",  # inside the warm-up it must warn
        seeds="seeds",
    ),
    Case(
        "hw-thermal",
        "hw-thermal:gpu={gpu}:at={at}:for={for}",
        "thermal-limited",
        True,
        flag="hw_events",  # inside the warm-up it must warn
        seeds="seeds",
    ),
    Case("ecc", "ecc:gpu={gpu}:at={at}", "hardware-fault", True, seeds="seeds"),
    Case("xid", "xid:gpu={gpu}:code=48:at={at}", "hardware-fault", True, seeds="seeds"),
    Case("xid", "xid:gpu={gpu}:code=79:at={at}", "hardware-fault", True, seeds="seeds"),
    # Telemetry faults after the warm-up, early enough for a freeze to be judged (FROZEN_S).
    Case("frozen", "frozen:gpu={gpu}:at={at}", "hardware-fault", True, named="frozen",
         seeds="seeds"),
    Case("glitch", "glitch:gpu={gpu}:rate=0.01:at={at}", "healthy", True, named="implausible",
         seeds="seeds"),
    Case("gap", "gap:at={at}:for={for}", "healthy", True, named="gap", seeds="seeds"),
    Case("reset", "reset:gpu={gpu}:at={at}", "healthy", True, named="reset", seeds="seeds"),
)  # fmt: skip
WARMUP_SHARE = 0.1  # of the timed faults' seeds, the share placed inside the warm-up
WARMUP_S = 4.0  # the warm-up is the first 5 s of load: a fault there ends inside it


@dataclass(frozen=True)
class Healthy:
    """Healthy servers of one SKU and workload, perhaps in a warmer room (``faults``)."""

    sku: str
    workload: str
    faults: tuple[str, ...] = ()
    seeds: str = "sku"  # "seeds" (the headline group) or "sku" (the others)

    @property
    def label(self) -> str:
        room = f" {' '.join(self.faults)}" if self.faults else ""
        return f"{self.sku} {self.workload}{room}"


# Every simulated SKU, in rooms from 5 °C cooler to 7 °C warmer than the SKU's nominal inlet
# (+4 °C is a rear-row position, breathing the front row's exhaust).
INLETS = (-5, 0, 4, 7)
SKU_NAMES = ("h100-sxm", "h200", "a100-sxm", "mi300x")
HEALTHY = (
    *(
        Healthy(sku, "mix", (f"inlet:delta={d}",) if d else (), "seeds" if d == 0 else "sku")
        for sku in SKU_NAMES
        for d in INLETS
    ),
    Healthy("h100-sxm", "gemm"),
)


def gpu_for(seed: int, gpus: int) -> int:
    return int(np.random.default_rng([seed, 7]).integers(gpus))


def timing(seed: int, duration_s: float) -> tuple[float, float]:
    """A timed fault's start (seconds after the load starts) and length, drawn per seed: a
    WARMUP_SHARE of them inside the warm-up and over before it ends (0-2 s in, 1-2 s long),
    the rest anywhere up to a minute before the end, 5 to 60 s long (short events are the
    hard ones)."""
    rng = np.random.default_rng([seed, 11])
    if rng.random() < WARMUP_SHARE:
        return round(float(rng.uniform(0.0, 2.0))), round(float(rng.uniform(1.0, 2.0)))
    at = float(rng.uniform(WARMUP_S + 2.0, duration_s - 60.0))
    return round(at), round(float(rng.uniform(5.0, 60.0)))


def telemetry_timing(seed: int, duration_s: float) -> tuple[float, float]:
    """A telemetry fault's start, from a minute into the load to where a freeze still has
    FROZEN_S and two minutes before the end, and a gap's length (20 s to 3 min)."""
    rng = np.random.default_rng([seed, 12])
    at = float(rng.uniform(60.0, duration_s - FROZEN_S - 120.0))
    return round(at), round(float(rng.uniform(20.0, 180.0)))
