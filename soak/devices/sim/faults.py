"""Fault injection of the simulated server: ``--sim-fault KIND[:key=value]...`` parsed and checked.

What each fault does to the devices is the server's business (``server.py``); this module
only knows the kinds, their keys and their rules.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from soak.errors import ConfigError


@dataclass(frozen=True, slots=True)
class _Rule:
    """What one key accepts: a number, maybe whole, within an optional range."""

    integer: bool = False
    low: float | None = None
    low_open: bool = False  # True: must be > low, else >= low
    high: float | None = None

    def problem(self, key: str, value: float) -> str | None:
        if self.integer and value != int(value):
            return f"{key} must be a whole number"
        too_low = self.low is not None and (
            value <= self.low if self.low_open else value < self.low
        )
        too_high = self.high is not None and value > self.high
        if not (too_low or too_high):
            return None
        if self.high is None:
            return f"{key} must be {'>' if self.low_open else '>='} {self.low:g}"
        side = "above" if self.low_open else "at least"
        return f"{key} must be {side} {self.low:g} and at most {self.high:g}"


@dataclass(frozen=True, slots=True)
class _Kind:
    """One fault kind: its keys and what it does."""

    about: str
    required: dict[str, _Rule]
    optional: dict[str, _Rule] = field(default_factory=dict)


_GPU = _Rule(integer=True, low=0)
_AT = _Rule(low=0)
_FOR = _Rule(low=0, low_open=True)

FAULT_KINDS: dict[str, _Kind] = {
    "airflow": _Kind(
        "heat-sink-to-air thermal resistance x factor (blocked or weak airflow)",
        {"gpu": _GPU, "factor": _Rule(low=0, low_open=True, high=20)},
    ),
    "power-cap": _Kind(
        "enforced power limit lowered to watts", {"gpu": _GPU, "watts": _Rule(low=0, low_open=True)}
    ),
    "hw-slowdown": _Kind(
        "HW_SLOWDOWN from at= (for for= seconds): clocks halved",
        {"gpu": _GPU, "at": _AT},
        {"for": _FOR},
    ),
    "power-brake": _Kind(
        "HW_POWER_BRAKE from at= (for for= seconds): clocks halved",
        {"gpu": _GPU, "at": _AT},
        {"for": _FOR},
    ),
    "hw-thermal": _Kind(
        "HW_THERMAL from at= (for for= seconds): a board thermal alert, clocks halved",
        {"gpu": _GPU, "at": _AT},
        {"for": _FOR},
    ),
    "ecc": _Kind(
        "count uncorrectable ECC errors at at=, row remap pending",
        {"gpu": _GPU, "at": _AT},
        {"count": _Rule(integer=True, low=1)},
    ),
    "xid": _Kind(
        "XID code at at=; 79 (fallen off the bus) loses the device",
        {"gpu": _GPU, "code": _Rule(integer=True, low=1, high=999), "at": _AT},
    ),
    "sdc": _Kind(
        "fraction rate of result checks fail (silent data corruption)",
        {"gpu": _GPU, "rate": _Rule(low=0, low_open=True, high=1)},
    ),
    "stall": _Kind(
        "input pipeline supplies only 1-fraction of what the device can consume",
        {"gpu": _GPU, "fraction": _Rule(low=0, low_open=True, high=1)},
        {"at": _AT, "for": _FOR},
    ),
    "contention": _Kind(
        "another process takes fraction of the device from at= (for for= seconds): soak's "
        "throughput x (1 - fraction), the device as busy and as hot",
        {"gpu": _GPU, "at": _AT, "fraction": _Rule(low=0, low_open=True, high=1)},
        {"for": _FOR},
    ),
    "inlet": _Kind(
        "inlet air warmer by delta °C (every GPU, or gpu=)",
        {"delta": _Rule(low=-20, high=40)},
        {"gpu": _GPU},
    ),
    "slow": _Kind(
        "throughput x factor at the same clocks (a weak part)",
        {"gpu": _GPU, "factor": _Rule(low=0, low_open=True, high=1)},
    ),
    "link": _Kind(
        "the device's collective link bandwidth x factor (ddp's all-reduce)",
        {"gpu": _GPU, "factor": _Rule(low=0, low_open=True, high=1)},
    ),
    "leaky": _Kind(
        "leakage power x factor (a leaky die)",
        {"gpu": _GPU, "factor": _Rule(low=0, low_open=True, high=10)},
    ),
    "frozen": _Kind(
        "every reading of the device repeats from at= on while its load goes on (a hung "
        "sensor or logger)",
        {"gpu": _GPU, "at": _AT},
    ),
    "glitch": _Kind(
        "fraction rate of the device's temperature readings read -75 °C (from at=)",
        {"gpu": _GPU, "rate": _Rule(low=0, low_open=True, high=1)},
        {"at": _AT},
    ),
    "gap": _Kind("no readings of any device from at= for for= seconds", {"at": _AT, "for": _FOR}),
    "reset": _Kind(
        "the device's cumulative counters restart from 0 at at= (a driver reload)",
        {"gpu": _GPU, "at": _AT},
    ),
    "sw-thermal": _Kind(
        "SW thermal slowdown as the driver does it (every GPU, or gpu=): heat-sink-to-air "
        "resistance x factor (default 3) holds the die at its max operating temperature, the "
        "clock alternating sub-second between its floor and its maximum",
        {},
        {"gpu": _GPU, "factor": _Rule(low=0, low_open=True, high=20)},
    ),
}

# Kinds that act at a time after the load starts; the others hold from the start.
_TIMED_KINDS = frozenset(
    {"hw-slowdown", "power-brake", "hw-thermal", "ecc", "xid", "stall", "frozen", "glitch", "gap",
     "reset", "contention"}
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Fault:
    """One injected fault, parsed from ``KIND[:key=value]...``; keys not given are None.

    ``at_s`` counts from the load's start; ``for_s`` None means until the end.
    """

    kind: str
    spec: str
    gpu: int | None = None
    at_s: float | None = None
    for_s: float | None = None
    factor: float | None = None
    watts: float | None = None
    count: int | None = None
    code: int | None = None
    rate: float | None = None
    fraction: float | None = None
    delta_c: float | None = None

    @property
    def timed(self) -> bool:
        return self.kind in _TIMED_KINDS


def fault_error(spec: str, problem: str) -> ConfigError:
    return ConfigError(f"--sim-fault {spec!r}: {problem}")


def _parse_pairs(spec: str, kind: str, parts: list[str]) -> dict[str, float]:
    """The key=value pairs of a spec, each checked against its kind's rules."""
    rules = FAULT_KINDS[kind]
    allowed = {**rules.required, **rules.optional}
    values: dict[str, float] = {}
    for part in parts:
        key, sep, raw = (s.strip() for s in part.partition("="))
        if not sep or not key:
            raise fault_error(spec, f"{part!r} is not key=value")
        if key not in allowed:
            raise fault_error(
                spec, f"unknown key {key!r} for {kind} (allowed: {', '.join(allowed)})"
            )
        if key in values:
            raise fault_error(spec, f"{key} given twice")
        try:
            value = float(raw)
        except ValueError:
            raise fault_error(spec, f"{key}={raw!r} is not a number") from None
        if not math.isfinite(value):
            raise fault_error(spec, f"{key}={raw!r} is not a finite number")
        problem = allowed[key].problem(key, value)
        if problem:
            raise fault_error(spec, problem)
        values[key] = value
    missing = [k for k in rules.required if k not in values]
    if missing:
        needs = ", ".join(f"{k}=" for k in rules.required)
        raise fault_error(spec, f"missing {missing[0]}= ({kind} needs {needs})")
    return values


def parse_fault(spec: str) -> Fault:
    """Parse one ``--sim-fault`` spec, e.g. ``airflow:gpu=3:factor=2.2``.

    Raises ConfigError with a one-line message naming the spec and the part that is wrong.
    Whether ``gpu`` exists on the server and ``watts`` suits the SKU is checked by SimServer.
    """
    spec = spec.strip()
    kind, *parts = (p.strip() for p in spec.split(":"))
    if not kind:
        raise fault_error(spec, "empty fault kind")
    if kind not in FAULT_KINDS:
        raise fault_error(spec, f"unknown kind {kind!r} (choose from {', '.join(FAULT_KINDS)})")
    v = _parse_pairs(spec, kind, parts)

    def whole(key: str) -> int | None:
        return int(v[key]) if key in v else None

    at_s = v.get("at")
    if kind in ("stall", "glitch") and at_s is None:
        at_s = 0.0
    if kind == "sw-thermal":
        v.setdefault("factor", SW_THERMAL_FACTOR)
    return Fault(
        kind=kind,
        spec=spec,
        gpu=whole("gpu"),
        at_s=at_s,
        for_s=v.get("for"),
        factor=v.get("factor"),
        watts=v.get("watts"),
        count=int(v.get("count", 1)) if kind == "ecc" else None,
        code=whole("code"),
        rate=v.get("rate"),
        fraction=v.get("fraction"),
        delta_c=v.get("delta"),
    )


# -- SW thermal slowdown as the driver does it (``sw-thermal``) -----------------------------
#
# Held at its max operating temperature, the driver does not set a lower clock and keep it:
# it alternates between the clock's floor and its maximum many times a second (a real 8-GPU
# node logged 210 and 1410 MHz from one 1-s read to the next at 84-86 °C). A read is then
# one of a few levels between the two: SW_THERMAL_SLICES slices of the read's interval, each
# at the floor or the maximum, in the proportion that gives the governor's mean clock. At a
# mean 60 % of the way up an H100's 345-1980 MHz, reads scatter by ~360 MHz.
SW_THERMAL_FACTOR = 3.0  # sink-to-air resistance x this: a device held at its thermal limit
SW_THERMAL_SLICES = 5  # 200-ms slices of a 1-s read, each at the floor or the maximum


def swinging(faults: Sequence[Fault], gpus: int) -> np.ndarray:
    """Per GPU, whether a ``sw-thermal`` fault makes its clock swing when thermally held."""
    out = np.zeros(gpus, dtype=bool)
    for f in faults:
        if f.kind == "sw-thermal":
            out[slice(None) if f.gpu is None else f.gpu] = True
    return out


def swung_clock(
    mean_mhz: np.ndarray, floor_mhz: float, top_mhz: float, rng: np.random.Generator
) -> np.ndarray:
    """Clock reads of devices alternating between ``floor_mhz`` and ``top_mhz``: each the
    mean of SW_THERMAL_SLICES slices at one or the other, the share at the top drawn so
    that the reads average to ``mean_mhz``."""
    up = np.clip((mean_mhz - floor_mhz) / (top_mhz - floor_mhz), 0.0, 1.0)
    slices = rng.binomial(SW_THERMAL_SLICES, up)
    return floor_mhz + (top_mhz - floor_mhz) * slices / SW_THERMAL_SLICES
