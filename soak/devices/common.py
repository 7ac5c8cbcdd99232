"""Pieces every vendor backend needs: logging each problem once (not once per sample for
two hours, STYLE.md), and the named fallback for energy without a counter."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass


class LogOnce:
    """Logs a message the first time its ``(what, problem)`` key is seen, never again. The
    set of keys is bounded, so a flapping device cannot grow it without end; when it is
    full, one last line says that logging stopped. Thread-safe (the XID thread logs too)."""

    MAX_LOGGED = 256

    def __init__(self, logger: logging.Logger, prefix: str) -> None:
        self._log = logger
        self._prefix = prefix
        self._logged: set[tuple[str, str]] = set()
        self._lock = threading.Lock()
        self._full = False

    def __call__(self, what: str, problem: str, message: str, level: int = logging.INFO) -> None:
        key = (what, problem)
        with self._lock:
            if key in self._logged:
                return
            if len(self._logged) >= self.MAX_LOGGED:
                if self._full:
                    return
                self._full = True
                message = f"{self._prefix}: too many distinct problems, logging no more"
                level = logging.WARNING
            else:
                self._logged.add(key)
        self._log.log(level, "%s", message)

    def __len__(self) -> int:
        return len(self._logged)


@dataclass(slots=True)
class EnergyIntegrator:
    """Energy integrated from power (trapezoid rule): the named fallback where a device has
    no energy counter (recorded as Capability.FALLBACK)."""

    total_j: float = 0.0
    last: tuple[float, float] | None = None

    def add(self, t_s: float, power_w: float | None) -> float | None:
        if power_w is None:
            return None
        if self.last is not None and t_s > self.last[0]:
            t0, p0 = self.last
            self.total_j += (t_s - t0) * (p0 + power_w) / 2
        self.last = (t_s, power_w)
        return self.total_j
