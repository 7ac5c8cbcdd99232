"""``dcgmi dmon -e FIELD,...`` text output.

A header ``#Entity  POWER  TMPTR ...`` (repeated every so often), an ``ID`` line (some DCGM
versions print the units there), then one ``GPU <n> v1 v2 ...`` row per GPU and sample;
``N/A`` is None. dmon prints no time: time is the sample count × ``--interval`` (its ``-d``
delay, 1 s by default); a sample ends when a GPU repeats.

The clock-event reasons are field 112 (``DVCCTR``, ``DCGM_FI_DEV_CLOCKS_EVENT_REASONS``,
once ``..._CLOCK_THROTTLE_REASONS``: NVML's bitmask, decimal or hex) or the time each was
active (1420-1424, ``CLKPCNS`` ... ``CLKEPBSNS``, in ns): both are read, the bitmask first.
Where two columns give one field, ``RANKS`` says which is used; every column not used is
named (``Trace.unused``).
"""

from __future__ import annotations

from pathlib import Path

from soak.importers.core import Column, Trace, parse_value, prefer
from soak.importers.source import ImportFailed, records
from soak.model import ClockReason

# dcgmi dmon's short column names (DCGM's dcgm_fields) → (soak's field, rank); the lower
# rank is used where a log has two for one field: the averaged power (155) over the
# instantaneous (157), the enforced limit (164) over the requested one (160).
RANKS: dict[str, tuple[str, int]] = {
    "TMPTR": ("temp_c", 0),
    "MMTMP": ("mem_temp_c", 0),
    "SMCLK": ("sm_clock_mhz", 0),
    "MMCLK": ("mem_clock_mhz", 0),
    "POWER": ("power_w", 0),
    "POWINST": ("power_w", 1),
    "EPLMT": ("power_limit_w", 0),
    "PMLMT": ("power_limit_w", 1),
    "GPUTL": ("util_pct", 0),
    "MCUTL": ("mem_util_pct", 0),
    "DVCCTR": ("clock_reasons", 0),
    # what the log says of the device itself
    "FBTTL": ("memory_total_mib", 0),
    "SMMAX": ("max_sm_clock_mhz", 0),
    "SDTMP": ("slowdown_temp_c", 0),
    "GGMOT": ("max_operating_temp_c", 0),
}
# The time each reason was active since the driver loaded, in ns (fields 1420-1424)
COUNTERS: dict[str, ClockReason] = {
    "CLKPCNS": ClockReason.SW_POWER_CAP,
    "CLKBSTNS": ClockReason.SYNC_BOOST,
    "CLKSWTHNS": ClockReason.SW_THERMAL,
    "CLKHWTHNS": ClockReason.HW_THERMAL,
    "CLKEPBSNS": ClockReason.HW_POWER_BRAKE,
}
NS = 1e-9


def read(path: Path, interval_s: float) -> Trace:
    trace = Trace(path, "dcgmi-dmon", f"sample count × {interval_s:g} s (dmon prints no time)")
    names: list[str] | None = None
    columns: list[Column] = []
    fields: dict[int, str] = {}
    counters: dict[int, ClockReason] = {}
    sample, seen = -1, set()
    for record in records(path):
        line, text = record.line, record.text.strip()
        if not text:
            continue
        if text.startswith("#"):
            header = text.lstrip("#").split()
            if not header or header[0].lower() != "entity":
                raise ImportFailed(path, line, f"not a dmon header: {text[:40]!r}")
            if names is not None and header[1:] != names:
                raise ImportFailed(path, line, "the header changes in the middle of the file")
            names = header[1:]
            columns = [Column(n) for n in names]
            fields, trace.unused, trace.preferred = prefer(names, RANKS)
            counters = {k: COUNTERS[n] for k, n in enumerate(names) if n in COUNTERS}
            if "clock_reasons" in fields.values() and counters:  # the bitmask holds them all
                trace.unused += [f"{names[k]} (DVCCTR preferred)" for k in counters]
                counters = {}
            losers = {u.split(" (")[0] for u in trace.unused}
            trace.unused += [
                n
                for k, n in enumerate(names)
                if k not in fields and k not in counters and n not in losers
            ]
            continue
        if text.split()[0] == "ID":
            continue
        if names is None:
            raise ImportFailed(path, line, "data before the '#Entity ...' header")
        cells = text.split()
        if len(cells) < 2 or cells[0] != "GPU" or not cells[1].isdigit():
            raise ImportFailed(path, line, f"not a 'GPU <n> ...' row: {text[:40]!r}")
        values = cells[2:]
        if len(values) != len(names):
            what = "truncated last line" if not record.complete else "wrong number of fields"
            raise ImportFailed(path, line, f"{what} ({len(values)} of {len(names)} values)")
        device = int(cells[1])
        if device in seen or sample < 0:
            sample, seen = sample + 1, set()
        seen.add(device)
        row = {f: parse_value(values[k], columns[k], path, line) for k, f in fields.items()}
        times = {}
        for k, bit in counters.items():
            value = parse_value(values[k], columns[k], path, line)
            times[int(bit)] = None if value is None else value * NS
        trace.add(device, sample * interval_s, row, line, counters=times)
    if names is None:
        raise ImportFailed(path, 1, "empty file (no '#Entity ...' header)")
    trace.check_not_empty()
    trace.resolve_reasons()
    return trace
