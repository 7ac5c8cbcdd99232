"""Progress while a soak runs: a live per-device table on a terminal, else one plain log
line per minute of run time (so a 2-hour soak under nohup leaves 120 lines, not 7200)."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Protocol, TextIO

from soak.model import RATE_UNITS
from soak.units import si

if TYPE_CHECKING:
    from soak.runner import Runner


class Display(Protocol):
    def update(self, runner: Runner, t_s: float) -> None: ...

    def close(self) -> None: ...


def _write(stream: TextIO | None, text: str) -> TextIO | None:
    """Write and flush; a stream that fails (a closed terminal, a log pipe whose reader
    died) is dropped, so that losing the progress display never stops a soak."""
    if stream is None:
        return None
    try:
        stream.write(text)
        stream.flush()
    except (OSError, ValueError):  # ValueError: the stream was closed
        return None
    return stream


def _value(v: float | None, fmt: str) -> str:
    return "n/a" if v is None else format(v, fmt)


def _eq_state(runner: Runner, index: int, t_s: float) -> str:
    detector = runner.detectors[index]
    if detector.reached:
        return f"steady @{detector.equilibrium_s / 60:.1f}m"
    if index not in runner.load_start_by_device:
        return "starting"
    eta = detector.eta_s(t_s)
    return "warming" if eta is None else f"warming, ~{eta / 60:.0f}m to go"


def device_lines(runner: Runner, t_s: float) -> list[str]:
    lines = []
    for info in runner.devices:
        row = runner.latest.get(info.index)
        rates = runner.latest_rate.get(info.index, {})
        rate = "  ".join(
            f"{p} {si(r, RATE_UNITS.get(unit, unit + '/s'))}"
            for p, (r, unit) in sorted(rates.items())
        )
        lines.append(
            f"  {info.index:>2}  {_value(row and row.temp_c, '5.0f')} °C"
            f"  {_value(row and row.sm_clock_mhz, '5.0f')} MHz"
            f"  {_value(row and row.power_w, '5.0f')} W  {rate or '-':<28}"
            f"  {_eq_state(runner, info.index, t_s)}"
        )
    return lines


class LiveDisplay:
    """Redraws the table in place, at most a few times a second of wall time."""

    def __init__(self, stream: TextIO, min_redraw_s: float = 0.5) -> None:
        self.stream: TextIO | None = stream
        self.min_redraw_s = min_redraw_s
        self._last = 0.0
        self._height = 0

    def update(self, runner: Runner, t_s: float) -> None:
        now = time.monotonic()
        if self.stream is None or now - self._last < self.min_redraw_s:
            return
        self._last = now
        header = f"soak {runner.backend.name} · {t_s / 60:6.1f} min · Ctrl-C stops and reports"
        lines = [header, *device_lines(runner, t_s)]
        up = f"\x1b[{self._height}F" if self._height else ""
        self.stream = _write(self.stream, up + "".join(f"\x1b[2K{line}\n" for line in lines))
        self._height = len(lines)

    def close(self) -> None:
        self.stream = _write(self.stream, "")


class LogDisplay:
    """One line per minute of run time: devices reporting, the hottest temperature, and how
    many devices are at equilibrium."""

    def __init__(self, stream: TextIO, every_s: float = 60.0) -> None:
        self.stream: TextIO | None = stream
        self.every_s = every_s
        self._next = 0.0

    def update(self, runner: Runner, t_s: float) -> None:
        if self.stream is None or t_s < self._next:
            return
        self._next = (t_s // self.every_s + 1) * self.every_s
        temps = [r.temp_c for r in runner.latest.values() if r.temp_c is not None]
        reached = sum(d.reached for d in runner.detectors.values())
        hottest = f"{max(temps):.0f} °C" if temps else "n/a"
        self.stream = _write(
            self.stream,
            f"soak: t={t_s / 60:.0f} min, {len(runner.latest)} devices reporting, "
            f"hottest {hottest}, {reached}/{len(runner.detectors)} at equilibrium\n",
        )

    def close(self) -> None:
        self.stream = _write(self.stream, "")


class QuietDisplay:
    def update(self, runner: Runner, t_s: float) -> None:
        pass

    def close(self) -> None:
        pass


def make_display(stream: TextIO | None = None) -> Display:
    stream = stream or sys.stderr
    if stream.isatty():
        return LiveDisplay(stream)
    return LogDisplay(stream)
