"""The progress log going nowhere (a `| tee` that died, a closed terminal) must not end a
soak of hours: the display drops the stream and the run reports as usual."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.reliability.helpers import REPO


def test_a_broken_log_pipe_does_not_stop_the_soak(tmp_path):
    read_end, write_end = os.pipe()
    os.close(read_end)  # nobody reads: every write to stderr fails with EPIPE
    try:
        done = subprocess.run(
            [sys.executable, "-m", "soak", "run", "--backend", "sim", "--workload", "gemm",
             "--minutes", "10", "--sim-gpus", "2", "--seed", "1", "--out", str(tmp_path)],
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            stdout=subprocess.PIPE,
            stderr=write_end,
            text=True,
            timeout=120,
        )  # fmt: skip
    finally:
        os.close(write_end)
    report = Path(done.stdout.strip().splitlines()[-1])
    assert report.name == "report.html" and report.is_file()
    verdict = json.loads((report.parent / "summary.json").read_text())["verdict"]
    assert done.returncode == {"PASS": 0, "FAIL": 1, "INCOMPLETE": 3}[verdict]  # not a crash
