"""The run store's layouts side by side, 8 devices at 1-s ticks: version 2's rows against
version 3's column blocks, at 24 hours and a week (issue 42).

For each store: what writing it cost per 8-GPU tick (row appends through ``RunStore.append``,
one call a tick as the runner makes them, ticks committed in groups of 0.1 s of wall time as
a simulated run commits them; or the block write ``RunStore.append_block``, 600 ticks a call
as a simulator stepped in blocks would), the file's size, and reading one device back
(``telemetry`` and ``work``, what the analysis asks of each device) in a child process of
its own: wall time, and peak RSS above the child's RSS before the read (Python and numpy).

"v2 rows" is version 2's layout and write: its ``append`` replayed (its statements, rows in
tick order with SQLite's own rowids, a savepoint a tick), read by today's reader (a store
without blocks reads as version 2 stored it). The week of v2 rows is filled through SQL in
bulk, tick after tick as its appends leave them (4.8 M ticks' objects appended one call a
tick take over 10 min here: its cost per tick is the 24-hour one's). The stores of one length
are written side by side, an hour of each in turn, so that the machine's load falls on each
alike.

``python bench/store_speed.py [--hours 24 168]``; prints a table and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import operator
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from soak.dataset import WorkColumns
from soak.model import TELEMETRY_FIELDS, DeviceInfo, Telemetry, WorkSample
from soak.store import BLOCK_ROWS, STORE_NAME, RunStore
from soak.validity import screen_all

GPUS = 8
HOUR = 3600
BLOCK_TICKS = 600  # ticks a block write takes: ten minutes of a simulator stepped in blocks
PARTS = (("gemm", "FLOP", 3.4e14), ("membw", "B", 6.0e11), ("train", "token", 1.5e4))
ROWS_ONLY = 10**12  # rows a block would need: never

CHILD = """
import json, sys, time
from soak.store import RunStore
def status(key):  # VmHWM: this process's peak RSS (ru_maxrss keeps the parent's over exec)
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) / 1024
before = status("VmRSS:")
t = time.perf_counter()
store = RunStore.open(sys.argv[1])
tele = store.telemetry(0)
work = store.work(0)
wall = time.perf_counter() - t
print(json.dumps({"read_s": wall, "rss_before_mib": before,
                  "read_peak_mib": status("VmHWM:") - before,
                  "rows": int(tele.t_s.size), "parts": len(work)}))
"""


def hour_of(device: int, hour: int) -> dict[str, np.ndarray]:
    """One device's telemetry for one hour of load, as NVML reads an H100: whole degrees,
    clocks in 15-MHz steps, power to the milliwatt; limits and counters that never move."""
    rng = np.random.default_rng(1000 * device + hour)
    t = hour * HOUR + np.arange(HOUR, dtype=float)
    temp = np.round(66.0 + 2 * device + 0.6 * np.sin(t / 900) + rng.normal(0, 0.4, HOUR))
    clock = np.round((1980 - 6 * (temp - 60)) / 15) * 15
    power = np.round(700 - rng.gamma(2, 1.5, HOUR), 3)
    still = {name: np.zeros(HOUR) for name in TELEMETRY_FIELDS[2:]}
    return still | {
        "t_s": t,
        "temp_c": temp,
        "mem_temp_c": temp - 4,
        "sm_clock_mhz": clock,
        "mem_clock_mhz": np.full(HOUR, 2619.0),
        "power_w": power,
        "power_limit_w": np.full(HOUR, 700.0),
        "energy_j": np.round(2.8e8 + 700.0 * t + np.cumsum(power - 700), 3),
        "util_pct": np.full(HOUR, 100.0),
        "mem_util_pct": np.round(60 + rng.normal(0, 2, HOUR)),
        "fan_pct": np.full(HOUR, np.nan),  # not supported: not read
        "clock_reasons": np.full(HOUR, 4.0),
        "power_violation_s": 3.0e4 + t,
        "foreign_load_pct": np.full(HOUR, np.nan),
    }


def work_of(device: int, tele: dict[str, np.ndarray]) -> list[WorkColumns]:
    t = tele["t_s"]
    verified = np.where(t % 60 == 0, 1.0, np.nan)  # a check each minute
    return [
        WorkColumns(
            device,
            part,
            unit,
            t - 1.0,
            t.copy(),
            np.round(rate * tele["sm_clock_mhz"] / 1650, 1),
            verified,
        )
        for part, unit, rate in PARTS
    ]


def ticks(
    tele: dict[int, dict[str, np.ndarray]], work: dict[int, list[WorkColumns]]
) -> Iterator[tuple[list[Telemetry], list[WorkSample]]]:
    """One hour as the runner appends it: a tick's rows of every device."""
    names = TELEMETRY_FIELDS[1:]
    rows = {
        d: np.column_stack([tele[d][n] for n in names]).tolist() for d in range(GPUS)
    }  # fmt: skip
    for k in range(HOUR):
        yield (
            [
                Telemetry(d, *(None if v != v else v for v in rows[d][k]))  # NaN: not read
                for d in range(GPUS)
            ],
            [
                WorkSample(
                    d,
                    float(w.t_start_s[k]),
                    float(w.t_end_s[k]),
                    w.part,
                    float(w.work[k]),
                    w.unit,
                    None if w.verified is None or w.verified[k] != 1.0 else True,
                )
                for d in range(GPUS)
                for w in work[d]
            ],
        )


def new_store(path: Path, block_rows: int) -> RunStore:
    store = RunStore.create(path, max_commit_delay_s=0.1, block_rows=block_rows)
    store.set_meta(run={"backend": "sim", "command": "bench/store_speed.py"})
    store.add_devices(
        DeviceInfo(i, "sim", "NVIDIA H100 (synthetic)", power_limit_w=700.0) for i in range(GPUS)
    )
    return store


class Hour:
    """One hour of 8 devices, in every form a writer takes it."""

    def __init__(self, hour: int, rows: bool) -> None:
        self.tele = {d: hour_of(d, hour) for d in range(GPUS)}
        self.work = {d: work_of(d, self.tele[d]) for d in range(GPUS)}
        self.ticks = list(ticks(self.tele, self.work)) if rows else []


class Writer:
    """One store being written an hour at a time, the seconds spent in the store counted."""

    def __init__(self, name: str, path: Path) -> None:
        self.name = name
        self.path = path
        path.parent.mkdir(parents=True)
        self.spent: float | None = 0.0

    def add(self, hour: Hour, number: int) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass


class Appends(Writer):
    """One ``append`` a tick, as the runner writes."""

    def __init__(self, name: str, path: Path, block_rows: int) -> None:
        super().__init__(name, path)
        self.store = new_store(path, block_rows)

    def add(self, hour: Hour, number: int) -> None:
        start = time.perf_counter()
        for telemetry, samples in hour.ticks:
            self.store.append(telemetry, samples)
        self.spent += time.perf_counter() - start

    def close(self) -> None:
        self.store.close()


class V2Appends(Writer):
    """Version 2's ``append``, replayed: its statements (rows in tick order, SQLite's own
    rowids), the tick's screen, a savepoint a tick, a commit each 0.1 s of wall time."""

    def __init__(self, name: str, path: Path) -> None:
        super().__init__(name, path)
        new_store(path, ROWS_ONLY).close()
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.limits = {d: 700.0 for d in range(GPUS)}
        self.last_commit = time.monotonic()

    def add(self, hour: Hour, number: int) -> None:
        conn, row_of = self.conn, operator.attrgetter(*TELEMETRY_FIELDS)
        start = time.perf_counter()
        for telemetry, samples in hour.ticks:
            flagged = [
                (f.device, f.t_s, f.field, f.value, f.low, f.high)
                for f in screen_all(telemetry, self.limits)
            ]
            if not conn.in_transaction:
                conn.execute("BEGIN")
            conn.execute("SAVEPOINT tick")
            conn.executemany(BULK_TELEMETRY, map(row_of, telemetry))
            if flagged:
                conn.executemany("INSERT INTO implausible VALUES (?, ?, ?, ?, ?, ?)", flagged)
            conn.executemany(BULK_WORK, map(_v2_work, samples))
            conn.execute("RELEASE tick")
            if time.monotonic() - self.last_commit >= 0.1:
                conn.execute("COMMIT")
                self.last_commit = time.monotonic()
        self.spent += time.perf_counter() - start

    def close(self) -> None:
        if self.conn.in_transaction:
            self.conn.execute("COMMIT")
        self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self.conn.close()


def _v2_work(w: WorkSample) -> tuple:
    verified = None if w.verified is None else int(w.verified)
    return (w.device, w.t_start_s, w.t_end_s, w.part, w.work, w.unit, verified, w.verify_error)


class Blocks(Writer):
    """One ``append_block`` every ``BLOCK_TICKS`` ticks, as a simulator stepped in blocks."""

    def __init__(self, name: str, path: Path) -> None:
        super().__init__(name, path)
        self.store = new_store(path, BLOCK_ROWS)

    def add(self, hour: Hour, number: int) -> None:
        for at in range(0, HOUR, BLOCK_TICKS):
            cut = slice(at, at + BLOCK_TICKS)
            tele = {d: {n: c[cut] for n, c in hour.tele[d].items()} for d in range(GPUS)}
            work = [
                WorkColumns(w.device, w.part, w.unit, w.t_start_s[cut], w.t_end_s[cut],
                            w.work[cut], None if w.verified is None else w.verified[cut])
                for d in range(GPUS) for w in hour.work[d]
            ]  # fmt: skip
            start = time.perf_counter()
            self.store.append_block(telemetry=tele, work=work)
            self.spent += time.perf_counter() - start

    def close(self) -> None:
        self.store.close()


class Bulk(Writer):
    """Version 2's rows through SQL in bulk, an hour a transaction, tick after tick as one
    append a tick leaves them (not timed: a week of appends takes too long)."""

    def __init__(self, name: str, path: Path) -> None:
        super().__init__(name, path)
        new_store(path, ROWS_ONLY).close()
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.spent = None

    def add(self, hour: Hour, number: int) -> None:
        names = TELEMETRY_FIELDS
        table = np.stack(
            [np.column_stack([np.full(HOUR, d), *(hour.tele[d][n] for n in names[1:])])
             for d in range(GPUS)], axis=1,
        ).reshape(HOUR * GPUS, len(names))  # fmt: skip
        rows = [tuple(None if v != v else v for v in r) for r in table.tolist()]
        samples = [
            (d, float(w.t_start_s[k]), float(w.t_end_s[k]), w.part, float(w.work[k]), w.unit,
             None if w.verified is None or w.verified[k] != 1.0 else 1, None)
            for k in range(HOUR) for d in range(GPUS) for w in hour.work[d]
        ]  # fmt: skip
        self.conn.execute("BEGIN")
        self.conn.executemany(BULK_TELEMETRY, rows)
        self.conn.executemany(BULK_WORK, samples)
        self.conn.execute("COMMIT")

    def close(self) -> None:
        self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self.conn.close()


BULK_TELEMETRY = (
    f"INSERT INTO telemetry ({', '.join(TELEMETRY_FIELDS)}) "
    f"VALUES ({', '.join('?' * len(TELEMETRY_FIELDS))})"
)
BULK_WORK = "INSERT INTO work VALUES (?, ?, ?, ?, ?, ?, ?, ?)"


def read_one_device(path: Path) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(path)],
        check=True,
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parent.parent,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(hours: int, tmp: Path) -> list[dict]:
    """The stores of ``hours`` written side by side, an hour of each in turn (the machine's
    load falls on each alike), then one device read back from each, twice in turn (the
    faster read and the higher peak shown)."""
    at = tmp / f"{hours}h"
    if hours <= 24:
        writers: list[Writer] = [
            V2Appends("v2 rows, append", at / "rows" / STORE_NAME),
            Appends("v3, append", at / "v3" / STORE_NAME, BLOCK_ROWS),
            Blocks("v3, append_block", at / "blocks" / STORE_NAME),
        ]
    else:
        writers = [
            Bulk("v2 rows, bulk SQL", at / "rows" / STORE_NAME),
            Blocks("v3, append_block", at / "blocks" / STORE_NAME),
        ]
    rows = any(isinstance(w, Appends | V2Appends) for w in writers)
    for number in range(hours):
        hour = Hour(number, rows)
        for writer in writers:
            writer.add(hour, number)
    out = []
    for writer in writers:
        writer.close()
        size = sum(p.stat().st_size for p in writer.path.parent.glob(f"{STORE_NAME}*"))
        out.append({"store": writer.name, "hours": hours, "store_mib": size / 2**20})
        if writer.spent is not None:
            out[-1]["us_per_tick"] = 1e6 * writer.spent / (hours * HOUR)
    for _ in range(2):
        for writer, row in zip(writers, out, strict=True):
            found = read_one_device(writer.path)
            assert found["rows"] == hours * HOUR, found
            row["read_s"] = min(row.get("read_s", found["read_s"]), found["read_s"])
            row["read_peak_mib"] = max(row.get("read_peak_mib", 0.0), found["read_peak_mib"])
    for writer in writers:
        writer.path.unlink()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hours", type=int, nargs="+", default=[24, 168])
    args = parser.parse_args()
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for hours in args.hours:
            out += run(hours, Path(tmp))
    print(
        f"{'store':<20} {'run':>10} {'µs/tick':>8} {'MiB':>8} {'read 1 dev s':>13} "
        f"{'read peak MiB':>14}"
    )
    for r in out:
        tick = f"{r['us_per_tick']:.0f}" if "us_per_tick" in r else "-"
        print(
            f"{r['store']:<20} {r['hours']:>4} h × {GPUS} {tick:>8} {r['store_mib']:>8.1f} "
            f"{r['read_s']:>13.2f} {r['read_peak_mib']:>14.1f}"
        )
    print(json.dumps({"bench": "store_speed", "gpus": GPUS, "runs": out}))


if __name__ == "__main__":
    main()
