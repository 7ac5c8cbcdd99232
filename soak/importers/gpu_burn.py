"""gpu-burn's stdout: status records as it prints them (``\\r``-separated, many repeated).

A record reads ``<pct>%  proc'd: n0 (g0 Gflop/s) - n1 (g1 Gflop/s) ...  errors: e0 - ...
temps: T0 C - T1 C ...``. It has no time stamp. Time is rebuilt from gpu-burn's own counters:
each report of device 0 adds Δproc'd × OPS_PER_MUL / (its Gflop/s × 1e9) seconds, the
interval gpu-burn itself divided by to print that rate (``--ops-per-mul``, from the
gpu-burn build's source). Other devices' rows are stamped on that clock; their work is
Δproc'd × OPS_PER_MUL over the interval their own rate implies.
"""

from __future__ import annotations

import re
from pathlib import Path

from soak.importers.core import Trace
from soak.importers.source import ImportFailed, records

# gpu_burn-drv.cpp with SIZE=2048 (the 2020 default); SIZE=8192 builds use 1100048498688.
DEFAULT_OPS_PER_MUL = 17_188_257_792

_STATUS = re.compile(
    r"^\s*(?P<pct>\d+(?:\.\d+)?)%\s+proc'd:\s*(?P<procd>.*?)\s+errors:\s*(?P<errors>.*?)"
    r"\s+temps:\s*(?P<temps>.*?)\s*$"
)
_PROCD = re.compile(r"(\d+)\s*\(\s*(\d+(?:\.\d+)?)\s*Gflop/s\s*\)")
_TEMP = re.compile(r"^(-?\d+(?:\.\d+)?)\s*C$")
_DEVICE = re.compile(r"^GPU (\d+): (.+?) \(UUID: (\S+?)\)")


def read(path: Path, ops_per_mul: float = DEFAULT_OPS_PER_MUL) -> Trace:
    trace = Trace(
        path,
        "gpu-burn",
        f"rebuilt from gpu-burn's counters: device 0's Δproc'd × {ops_per_mul:.0f} FLOP / "
        "its Gflop/s (the file has no time stamps)",
        work_unit="FLOP",
    )
    previous_text = None
    procd: list[int] | None = None  # at the last row
    pending_temps: list[float | None] | None = None
    clock = 0.0
    first = True
    n_devices = 0
    last_procd: list[int] = []
    last_rates: list[float] = []
    for record in records(path):
        text = record.text
        if text == previous_text or not text.strip():
            continue
        previous_text = text
        match = _STATUS.match(text)
        if match is None:
            device = _DEVICE.match(text.strip())
            if device is not None:
                trace.names[int(device.group(1))] = device.group(2)
                trace.uuids[int(device.group(1))] = device.group(3)
                continue
            if "proc'd" in text or "temps:" in text:
                what = "truncated last record" if not record.complete else "unreadable status"
                raise ImportFailed(path, record.line, f"{what}: {text.strip()[:60]!r}")
            continue  # start-up and summary lines
        counts, rates = _procd(path, record.line, match.group("procd"))
        temps = _temps(path, record.line, match.group("temps"), len(counts))
        if first:
            n_devices = len(counts)
            procd = counts
            last_procd, last_rates = counts, rates
            pending_temps = temps
            _row(trace, 0.0, counts, rates, [0] * n_devices, temps, ops_per_mul, record.line)
            first = False
            continue
        if len(counts) != n_devices:
            raise ImportFailed(
                path, record.line, f"{len(counts)} devices after {n_devices} in earlier records"
            )
        assert procd is not None
        if any(c < p for c, p in zip(counts, last_procd, strict=True)):
            raise ImportFailed(path, record.line, "a proc'd counter goes backwards")
        last_procd, last_rates, pending_temps = counts, rates, temps
        if counts[0] != procd[0]:
            if rates[0] <= 0:
                raise ImportFailed(path, record.line, "device 0 reports work at 0 Gflop/s")
            clock += (counts[0] - procd[0]) * ops_per_mul / (rates[0] * 1e9)
            _row(trace, clock, counts, rates, procd, temps, ops_per_mul, record.line)
            procd = counts
    if first:
        raise ImportFailed(path, 1, "no gpu-burn status record (…% proc'd: … temps: …)")
    assert procd is not None and pending_temps is not None
    if last_procd != procd:  # reports since device 0's last one: stamp them at its clock
        _row(trace, clock + 1e-3, last_procd, last_rates, procd, pending_temps, ops_per_mul, 0)
    return trace


def _row(
    trace: Trace,
    t: float,
    counts: list[int],
    rates: list[float],
    before: list[int],
    temps: list[float | None],
    ops_per_mul: float,
    line: int,
) -> None:
    for i, (n, n0, rate, temp) in enumerate(zip(counts, before, rates, temps, strict=True)):
        done = n - n0
        if done > 0 and rate > 0:
            interval = done * ops_per_mul / (rate * 1e9)
            trace.add(i, t, {"temp_c": temp, "throughput": rate * 1e9}, line, interval)
        else:
            trace.add(i, t, {"temp_c": temp}, line)


def _procd(path: Path, line: int, text: str) -> tuple[list[int], list[float]]:
    pairs = _PROCD.findall(text)
    if not pairs or len(pairs) != text.count("Gflop/s"):
        raise ImportFailed(path, line, f"unreadable proc'd list {text[:60]!r}")
    return [int(n) for n, _ in pairs], [float(g) for _, g in pairs]


def _temps(path: Path, line: int, text: str, n: int) -> list[float | None]:
    parts = [p.strip() for p in text.split(" - ")]
    if len(parts) != n:
        raise ImportFailed(path, line, f"{len(parts)} temperatures for {n} devices")
    out: list[float | None] = []
    for part in parts:
        match = _TEMP.match(part)
        if match is None:
            if part in ("--", "N/A", "[N/A]", ""):
                out.append(None)
                continue
            raise ImportFailed(path, line, f"temperature {part[:20]!r} is not '<n> C'")
        out.append(float(match.group(1)))
    return out
