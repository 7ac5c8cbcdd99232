"""Formatting numbers with their units for people: "612 TFLOP/s", "3.35 TB/s", "n/a"."""

from __future__ import annotations

import math

NOT_AVAILABLE = "not available"

_PREFIXES = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def si(value: float | None, unit: str, digits: int = 3) -> str:
    """``value`` with an SI prefix and ``digits`` significant figures; None → not available."""
    if value is None or not math.isfinite(value):
        return NOT_AVAILABLE
    for scale, prefix in _PREFIXES:
        if abs(value) >= scale:
            return f"{_sig(value / scale, digits)} {prefix}{unit}"
    return f"{_sig(value, digits)} {unit}"


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
