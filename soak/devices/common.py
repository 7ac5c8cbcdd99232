"""Pieces every vendor backend needs: what a failed read means for a metric, which readings
are plausible, logging each problem once (not once per sample for two hours, STYLE.md), and
the named fallback for energy without a counter."""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from soak.errors import FunctionMissing, GpuLost, NoPermission, NotSupported, SoakError
from soak.model import Capability

# A read that failed with one of these says the metric cannot be read on this device; any
# other failure is one missing reading of a readable metric.
CAPABILITY_OF: dict[type[SoakError], Capability] = {
    NotSupported: Capability.NOT_SUPPORTED,
    NoPermission: Capability.NO_PERMISSION,
    FunctionMissing: Capability.MISSING,
}


def why_not(failures: Iterable[Capability]) -> Capability:
    """The most useful reason among failed ways: permission, then support, then missing."""
    seen = set(failures)
    for cap in (Capability.NO_PERMISSION, Capability.NOT_SUPPORTED):
        if cap in seen:
            return cap
    return Capability.MISSING


def clean_number(v: float, sentinels: frozenset[int]) -> float | None:
    """A number from a vendor binding, or None for the binding's 'not available' sentinels
    and for numbers no reading can be: negative, not finite, or at the top of a 64-bit range
    (such as the ~9.2e18 an HBM sensor without a reading gives)."""
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return None if v in sentinels or not 0 <= v < 2**63 - 1 else v
    return v if math.isfinite(v) and 0 <= v < 9e18 else None


# Plausible readings, per kind of metric: a value outside is a sensor fault, read as None.


def any_value(v: float) -> bool:
    return True


def temp_ok(v: float) -> bool:
    """0 °C is 'no sensor' (NVML's HBM reading); anything over 200 °C is garbage (e.g. ~9.2e18)."""
    return 0 < v <= 200


def positive(v: float) -> bool:
    return v > 0


def pct(v: float) -> bool:
    return 0 <= v <= 100


@dataclass(frozen=True, slots=True)
class Call:
    """One vendor function with constant arguments, by their names in the binding (resolved
    when called, so a binding without one makes a missing function, not an import error)."""

    func: str
    args: tuple[str, ...] = ()
    kwargs: tuple[tuple[str, str], ...] = ()

    @property
    def key(self) -> str:
        """The name of this read in capability tables and raw probe dumps."""
        parts = [*self.args, *(f"{k}={v}" for k, v in self.kwargs)]
        return f"{self.func}({', '.join(parts)})"


@dataclass(frozen=True, slots=True)
class Metric:
    """A ``Telemetry`` (or ``DeviceInfo``) field and the backend's ways to read it, best first:
    the probe keeps, per device, the first way that answers."""

    name: str
    ways: tuple[Any, ...]  # the backend's ``Way``s
    plausible: Callable[[Any], bool] = any_value
    integer: bool = False  # a count or bitmask: read as int
    raw: bool = False  # raw material for per-device state (a tuple), passed on unchecked

    def accept(self, value: Any, label: str, log_once: LogOnce) -> Any:
        """A converted reading as soak's value: None, text and raw values pass; a value that
        is no number, or a number this metric cannot have, is logged once and read as None."""
        if value is None or isinstance(value, str) or self.raw:
            return value
        if not isinstance(value, int | float) or not self.plausible(value):
            log_once(
                label,
                "implausible",
                f"{log_once.prefix}: {self.name} read {value!r} from {label}: "
                "not plausible, read as None",
            )
            return None
        return int(value) if self.integer else value


class LogOnce:
    """Logs a message the first time its ``(what, problem)`` key is seen, never again. The
    set of keys is bounded, so a flapping device cannot grow it without end; when it is
    full, one last line says that logging stopped. Thread-safe (the XID thread logs too)."""

    MAX_LOGGED = 256

    def __init__(self, logger: logging.Logger, prefix: str) -> None:
        self._log = logger
        self.prefix = prefix
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
                message = f"{self.prefix}: too many distinct problems, logging no more"
                level = logging.WARNING
            else:
                self._logged.add(key)
        self._log.log(level, "%s", message)

    def __len__(self) -> int:
        return len(self._logged)


def failed_read(
    log_once: LogOnce, key: str, exc: SoakError, error: str, where: str = ""
) -> Capability:
    """What a failed read means, logged once per read and problem: not supported, no
    permission (a WARNING: an operator can fix it) or missing for its metric; SUPPORTED for
    one missing reading of a readable metric (a WARNING per vendor error). ``error`` is the
    vendor's name for the failure, ``where`` e.g. " on device 3"."""
    cap = CAPABILITY_OF.get(type(exc), Capability.SUPPORTED)
    if cap is Capability.SUPPORTED:
        message = f"{log_once.prefix}: {key} failed{where} ({exc}); this reading is missing"
        log_once(key, error, message, logging.WARNING)
    else:
        why = exc if cap is Capability.MISSING else error
        level = logging.WARNING if cap is Capability.NO_PERMISSION else logging.INFO
        log_once(key, cap.value, f"{log_once.prefix}: {key} {cap.value}{where} ({why})", level)
    return cap


def confirm_alive(index: int, read: Callable[[], object]) -> None:
    """After an ambiguous failure (NVML's 'Unknown Error', amdsmi's I/O errors): a device
    that fails ``read``, one every live device answers, for any reason but support or
    permission is lost (GpuLost); otherwise the failure was a one-off."""
    try:
        read()
    except (NotSupported, NoPermission, FunctionMissing):
        return
    except SoakError as exc:
        raise GpuLost(index, f"stopped answering ({exc})") from exc


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
