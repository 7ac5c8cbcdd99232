"""Shared by the reliability tests: a `soak run` in a subprocess to signal and watch, the
processes under it, and a look inside a run store without disturbing its writer."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from soak.config import RunConfig
from soak.model import EventKind
from soak.profile import load_profile
from soak.progress import Progress
from soak.store import RunStore

if TYPE_CHECKING:
    from soak.runner import Runner

REPO = Path(__file__).resolve().parents[2]

# Windows short enough that a few seconds of load have a cold and a steady window (the cold
# one ends 1 s into the load: COLD_DONE_S leaves a margin), and no
# retention floor: a CPU shared with other tests must not turn an interrupted run into a
# FAIL, and seconds of load are judged (min_load_s 0). What these tests judge is how the
# run ended, not how fast the CPU was or whether the load was long enough.
SHORT_PROFILE = """\
name = "reliability"
[windows]
cold_start_s = 0.2
cold_length_s = 0.8
eq_window_s = 4.0
eq_check_interval_s = 1.0
steady_length_s = 1.0
min_steady_s = 1.0
[checks]
min_throughput_retention = 0.0
max_jitter_cv = 10.0
min_load_s = 0.0
"""

# A real GEMM load on the CPU backend, as small as it goes: one thread, 128 x 128 products,
# steps of 0.1 s, ticks of 0.25 s.
CPU_GEMM = [
    "--backend", "cpu", "--workload", "gemm", "--baseline", "0", "--interval", "0.25",
    "--option", "gemm_n=128", "--option", "mem_bytes=4000000", "--option", "step_s=0.1",
    "--option", "cpu_threads=1",
]  # fmt: skip


COLD_DONE_S = 1.5  # seconds of load after which the cold window of SHORT_PROFILE is whole
HEARTBEAT_S = 1.5  # the in-process runs' heartbeat limit; their steps take 0.05 s


def run_config(tmp_path: Path, profile: Path, **overrides: Any) -> RunConfig:
    """A 5-second wall-clock run at 0.1 s ticks, no baseline, writing under tmp_path."""
    values: dict[str, Any] = {
        "backend": "cpu",
        "workload": "gemm",
        "duration_s": 5.0,
        "baseline_s": 0.0,
        "interval_s": 0.1,
        "heartbeat_timeout_s": HEARTBEAT_S,
        "profile": load_profile(str(profile)),
        "out": tmp_path / "reports",
    }
    return RunConfig(**{**values, **overrides})


class Hook:
    """The runner's test hook: acts once, ``after_s`` after the first tick at which every
    device has finished work, and records every tick it is called at (the runner calls it
    each tick once the tick is stored)."""

    def __init__(self, act: Callable[[Runner, float], None], after_s: float = 0.0) -> None:
        self.act = act
        self.after_s = after_s
        self.all_working_at: float | None = None
        self.acted_at: float | None = None
        self.ticks: list[float] = []

    def __call__(self, runner: Runner, progress: Progress) -> None:
        t_s = progress.t_s
        self.ticks.append(t_s)
        working = all(d.work_start_s is not None for d in progress.devices)
        if self.all_working_at is None and working:
            self.all_working_at = t_s
        due = self.all_working_at is not None and t_s >= self.all_working_at + self.after_s
        if self.acted_at is None and due:
            self.acted_at = t_s
            self.act(runner, t_s)


def outcome_events(store: RunStore) -> dict[int, dict[str, Any]]:
    """Each device's WORKER_OUTCOME details; there must be exactly one per worker."""
    events = [e for e in store.events() if e.kind is EventKind.WORKER_OUTCOME]
    by_device = {e.device: e.details for e in events if e.device is not None}
    assert len(by_device) == len(events), "one outcome per worker"
    return by_device


def write_profile(folder: Path) -> Path:
    path = folder / "reliability.toml"
    path.write_text(SHORT_PROFILE)
    return path


def wait_until(done: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.05)


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting to be reaped does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid``, from /proc (children of children too)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return {p for p in found if alive(p)}


def workers(pid: int) -> set[int]:
    """The worker processes under ``pid``: spawned by multiprocessing (the resource
    tracker, also a child, is not one)."""
    out = set()
    for child in descendants(pid):
        try:
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:
            continue
        if b"spawn_main" in cmdline:
            out.add(child)
    return out


def query(store: Path, sql: str) -> list[tuple]:
    """One read of a store that may still be written: its own short connection, no
    transaction left open (the writer's checkpoint must not wait on us)."""
    conn = sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=5.0)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def integrity(store: Path) -> str:
    return query(store, "PRAGMA integrity_check")[0][0]


class SoakRun:
    """``python -m soak run`` in a subprocess, output to files, watched through its store."""

    def __init__(self, out: Path, *args: str) -> None:
        self.out = out
        self.stdout_path = out.parent / f"{out.name}.stdout"
        self.stderr_path = out.parent / f"{out.name}.stderr"
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        with self.stdout_path.open("w") as stdout, self.stderr_path.open("w") as stderr:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "soak", "run", "--out", str(out), *args],
                cwd=REPO,
                env=env,
                stdout=stdout,
                stderr=stderr,
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def store(self) -> Path | None:
        found = sorted(self.out.glob("*/*/soak.sqlite"))
        return found[0] if found else None

    def count(self, sql: str) -> int:
        store = self.store()
        if store is None:
            return 0
        try:
            return int(query(store, sql)[0][0] or 0)
        except sqlite3.Error:  # created but its tables not yet committed
            return 0

    def wait_for_load(self, seconds: float = COLD_DONE_S, timeout_s: float = 60.0) -> None:
        """Until the stored work spans ``seconds`` of load (by default: the short profile's
        cold window is whole, so that an early end is INCOMPLETE, not "no cold window")."""

        def ready() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"soak exited early ({self.proc.returncode}): {self.stderr}")
            span = "SELECT MAX(t_end_s) - MIN(t_start_s) FROM work"
            store = self.store()
            try:
                return store is not None and float(query(store, span)[0][0] or 0) >= seconds
            except sqlite3.Error:  # created but its tables not yet committed
                return False

        wait_until(ready, timeout_s, f"{seconds} s of load in the store")

    def signal(self, signum: int = signal.SIGINT) -> float:
        """Send ``signum``; returns the time.monotonic() at which it was sent."""
        sent = time.monotonic()
        self.proc.send_signal(signum)
        return sent

    def wait(self, timeout_s: float = 60.0) -> int:
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise

    @property
    def stdout(self) -> str:
        return self.stdout_path.read_text()

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text()

    def report(self) -> Path:
        """The report path: the last line `soak run` prints."""
        return Path(self.stdout.strip().splitlines()[-1])

    def kill(self) -> None:
        """Leave nothing behind, whatever the test did."""
        for pid in descendants(self.pid) | {self.pid}:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.proc.wait(10)
