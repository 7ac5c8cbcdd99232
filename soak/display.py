"""Progress while a soak runs: a live per-device table on a terminal, else one plain log
line per minute of run time (so a 2-hour soak under nohup leaves 120 lines, not 7200)."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from soak.model import RATE_UNITS
from soak.progress import DeviceProgress, Progress, Watcher
from soak.units import si


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


def _eq_state(device: DeviceProgress) -> str:
    if device.equilibrium_s is not None:
        return f"steady @{device.equilibrium_s / 60:.1f}m"
    if device.work_start_s is None:
        return "starting"
    return "warming" if device.eta_s is None else f"warming, ~{device.eta_s / 60:.0f}m to go"


def device_lines(progress: Progress) -> list[str]:
    lines = []
    for device in progress.devices:
        row = device.telemetry
        rate = "  ".join(
            f"{r.part} {si(r.rate, RATE_UNITS.get(r.unit, r.unit + '/s'))}" for r in device.rates
        )
        lines.append(
            f"  {device.index:>2}  {_value(row and row.temp_c, '5.0f')} °C"
            f"  {_value(row and row.sm_clock_mhz, '5.0f')} MHz"
            f"  {_value(row and row.power_w, '5.0f')} W  {rate or '-':<28}"
            f"  {_eq_state(device)}"
        )
    return lines


class LiveDisplay:
    """Redraws the table in place, at most a few times a second of wall time."""

    def __init__(self, stream: TextIO, min_redraw_s: float = 0.5) -> None:
        self.stream: TextIO | None = stream
        self.min_redraw_s = min_redraw_s
        self._last = 0.0
        self._height = 0

    def update(self, progress: Progress) -> None:
        now = time.monotonic()
        if self.stream is None or now - self._last < self.min_redraw_s:
            return
        self._last = now
        header = (
            f"soak {progress.backend} · {progress.t_s / 60:6.1f} min · Ctrl-C stops and reports"
        )
        lines = [header, *device_lines(progress)]
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

    def update(self, progress: Progress) -> None:
        t_s = progress.t_s
        if self.stream is None or t_s < self._next:
            return
        self._next = (t_s // self.every_s + 1) * self.every_s
        rows = [d.telemetry for d in progress.devices if d.telemetry is not None]
        temps = [r.temp_c for r in rows if r.temp_c is not None]
        reached = sum(d.reached for d in progress.devices)
        hottest = f"{max(temps):.0f} °C" if temps else "n/a"
        self.stream = _write(
            self.stream,
            f"soak: t={t_s / 60:.0f} min, {len(rows)} devices reporting, "
            f"hottest {hottest}, {reached}/{len(progress.devices)} at equilibrium\n",
        )

    def close(self) -> None:
        self.stream = _write(self.stream, "")


def make_display(stream: TextIO | None = None) -> Watcher:
    stream = stream or sys.stderr
    if stream.isatty():
        return LiveDisplay(stream)
    return LogDisplay(stream)
