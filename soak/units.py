"""Formatting numbers with their units for people: "612 TFLOP/s", "3.35 TB/s", "n/a"."""

from __future__ import annotations

import math

NOT_AVAILABLE = "not available"

# The SI prefixes soak prints, largest first: above one for rates, below for energy per work.
PREFIXES = (
    (1e15, "P"),
    (1e12, "T"),
    (1e9, "G"),
    (1e6, "M"),
    (1e3, "k"),
    (1e-3, "m"),
    (1e-6, "µ"),
    (1e-9, "n"),
    (1e-12, "p"),
    (1e-15, "f"),
)
_LARGE = tuple((s, p) for s, p in PREFIXES if s > 1)
_SMALL = tuple((s, p) for s, p in PREFIXES if s < 1)
# The rate of each unit of work a workload counts.
RATE_UNITS = {"FLOP": "FLOP/s", "B": "B/s", "token": "token/s"}


def rate_unit(unit: str | None) -> str:
    """The rate of a unit of work: "FLOP" → "FLOP/s"; "" where the unit is not known."""
    if not unit:
        return ""
    return RATE_UNITS.get(unit, f"{unit}/s")


def prefix(value: float) -> tuple[float, str]:
    """The scale and prefix of the largest SI prefix at most ``value`` (1 and "" below k)."""
    return next(((s, p) for s, p in _LARGE if value >= s), (1.0, ""))


def si(value: float | None, unit: str, digits: int = 3) -> str:
    """``value`` with an SI prefix and ``digits`` significant figures; None → not available."""
    if value is None or not math.isfinite(value):
        return NOT_AVAILABLE
    for scale, name in _LARGE:
        if abs(value) >= scale:
            return f"{_sig(value / scale, digits)} {name}{unit}"
    return f"{_sig(value, digits)} {unit}"


def small_si(value: float | None, unit: str, digits: int = 3) -> str:
    """Like ``si`` but for values below one too: 1.02e-12 J/FLOP → "1.02 pJ/FLOP"."""
    if value is None or not math.isfinite(value):
        return NOT_AVAILABLE
    if value == 0 or abs(value) >= 1:
        return si(value, unit, digits)
    scale, name = next(((s, p) for s, p in _SMALL if abs(value) >= s), _SMALL[-1])
    scaled = value / scale
    decimals = max(digits - 1 - math.floor(math.log10(abs(scaled))), 0)
    return f"{scaled:.{decimals}f} {name}{unit}"


def _sig(value: float, digits: int) -> str:
    if value == 0:
        return "0"
    decimals = max(digits - 1 - math.floor(math.log10(abs(value))), 0)
    return f"{value:.{decimals}f}"


def num(value: float | None, fmt: str = ".1f", suffix: str = "") -> str:
    if value is None or not math.isfinite(value):
        return NOT_AVAILABLE
    return f"{value:{fmt}}{suffix}"


def pct(value: float | None, digits: int = 1) -> str:
    """A fraction as a percentage: 0.918 → "91.8 %"."""
    if value is None or not math.isfinite(value):
        return NOT_AVAILABLE
    return f"{100 * value:.{digits}f} %"


def plural(count: int, word: str, words: str | None = None) -> str:
    """ "1 device", "3 devices", "0 failures": a count and its noun, singular only for one."""
    return f"{count:,} {word if count == 1 else words or word + 's'}"


def duration(seconds: float | None) -> str:
    """A length of time for people: "95 s", "10.8 min", "2.50 h"."""
    if seconds is None or not math.isfinite(seconds):
        return NOT_AVAILABLE
    if abs(seconds) < 120:
        return f"{seconds:.0f} s"
    if abs(seconds) < 3 * 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.2f} h"


def minutes(seconds: float | None) -> str:
    """A time in minutes with one decimal, "7.2 min": how the report's texts give a time
    since a device's load start, the origin its tables measure from."""
    if seconds is None or not math.isfinite(seconds):
        return NOT_AVAILABLE
    return f"{seconds / 60:.1f} min"
