"""``dcgmi dmon -e FIELD,...`` text output.

A header ``#Entity  POWER  TMPTR ...`` (repeated every so often), an ``ID`` line (some DCGM
versions print the units there), then one ``GPU <n> v1 v2 ...`` row per GPU and sample;
``N/A`` is None. dmon prints no time: time is the sample count × ``--interval`` (its ``-d``
delay, 1 s by default); a sample ends when a GPU repeats.
"""

from __future__ import annotations

from pathlib import Path

from soak.importers.core import Column, Trace, parse_value
from soak.importers.source import ImportFailed, records

# dcgmi dmon's short column names → soak's fields (fields 150, 140, 100, 101, 155, 160, 203,
# 204); other columns are kept out.
COLUMN_FIELDS = {
    "TMPTR": "temp_c",
    "MMTMP": "mem_temp_c",
    "SMCLK": "sm_clock_mhz",
    "MMCLK": "mem_clock_mhz",
    "POWER": "power_w",
    "PMLMT": "power_limit_w",
    "GPUTL": "util_pct",
    "MCUTL": "mem_util_pct",
}


def read(path: Path, interval_s: float) -> Trace:
    trace = Trace(path, "dcgmi-dmon", f"sample count × {interval_s:g} s (dmon prints no time)")
    names: list[str] | None = None
    columns: list[Column] = []
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
        row = {
            COLUMN_FIELDS[n]: parse_value(v, c, path, line)
            for n, v, c in zip(names, values, columns, strict=True)
            if n in COLUMN_FIELDS
        }
        trace.add(device, sample * interval_s, row, line)
    if names is None:
        raise ImportFailed(path, 1, "empty file (no '#Entity ...' header)")
    trace.check_not_empty()
    return trace
