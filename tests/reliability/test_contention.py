"""A real CPU soak with real competing processes: the throughput it loses while they run is
diagnosed host contention with its figure, never a hardware fault."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys

import pytest

from tests.reliability.helpers import CPU_GEMM, SoakRun, query, wait_until

# Short windows: cold from 1 s to 5 s of load, steady the last 10 s, no equilibrium in so
# short a run; a 10 % loss fails retention.
PROFILE = """\
name = "contention"
[windows]
cold_start_s = 1.0
cold_length_s = 4.0
eq_window_s = 300.0
eq_check_interval_s = 30.0
steady_length_s = 10.0
min_steady_s = 10.0
[checks]
min_throughput_retention = 0.9
min_load_s = 0.0  # 25 s of load judged: the contention is what is tested
max_jitter_cv = 10.0
"""
LOAD_S = 25.0  # the steady window, from 15 s, starts well after the competitors (at ~6 s)
BUSY = "while True: pass"
STOPS = "SELECT count(*) FROM events WHERE kind = 'stop'"


@pytest.mark.slow
def test_a_cpu_soak_with_competing_processes_is_host_contention_not_a_fault(tmp_path) -> None:
    profile = tmp_path / "contention.toml"
    profile.write_text(PROFILE)
    soak = SoakRun(
        tmp_path / "reports",
        *CPU_GEMM,
        "--minutes", str(LOAD_S / 60), "--profile", str(profile),
    )  # fmt: skip
    competitors: list[subprocess.Popen] = []
    try:
        # once the cold window is over, busy loops on every core: not soak's processes
        def past_cold() -> bool:
            store = soak.store()
            if store is None:
                return False
            try:
                (span,) = query(store, "SELECT MAX(t_end_s) - MIN(t_end_s) FROM work")[0]
            except sqlite3.OperationalError:  # the store is there, its tables not yet
                return False
            return span is not None and span > 6.0

        wait_until(past_cold, 120.0, "the end of the cold window")
        for _ in range(3 * (os.cpu_count() or 1)):
            competitors.append(subprocess.Popen([sys.executable, "-c", BUSY]))

        # until the load has stopped: the report is written without them
        def stopped() -> bool:
            return soak.proc.poll() is not None or soak.count(STOPS) > 0

        wait_until(stopped, 300.0, "the end of the load")
    finally:
        # every busy loop is killed before any is waited on: a wait cut short (the test's
        # timeout) must not leave the others spinning through the rest of the suite
        for p in competitors:
            p.kill()
        for p in competitors:
            p.wait()
    try:
        soak.proc.wait(timeout=300)
    finally:
        if soak.proc.poll() is None:
            soak.proc.kill()
    stdout = soak.stdout_path.read_text()
    assert soak.proc.returncode == 3, stdout + soak.stderr_path.read_text()  # INCOMPLETE
    assert "hardware-fault" not in stdout and "RMA" not in stdout
    (summary_path,) = (tmp_path / "reports").glob("*/*/summary.json")
    summary = json.loads(summary_path.read_text())
    (device,) = summary["devices"]
    assert device["diagnosis"] == "host contention", device["diagnosis_evidence"]
    assert device["diagnosis_next_step"].startswith("rerun on an idle host")
    evidence = " ".join(device["diagnosis_evidence"])
    assert "steady gemm" in evidence and "host contention: other work used" in evidence
    assert "INCOMPLETE  device 0: throughput_retention: steady gemm" in stdout
