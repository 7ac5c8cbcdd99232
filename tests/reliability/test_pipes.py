"""Every command's exit code through real pipes whose reader leaves early (`| head -3`): a
closed pipe never changes the code, never prints a traceback and never stops a soak; the
run goes on, writes its report and exits with its verdict's code (issue 43)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.reliability.helpers import REPO

# A verdict of each kind from the simulator, cheap on its virtual clock: 25 min reach
# equilibrium and pass; an ECC error fails at any length; 3 min cannot be judged otherwise
# (min_load_s).
SIM = ["run", "--backend", "sim", "--workload", "gemm", "--sim-gpus", "1", "--seed", "3"]
VERDICTS = {
    "PASS": [*SIM, "--minutes", "25"],
    "FAIL": [*SIM, "--minutes", "3", "--sim-fault", "ecc:gpu=0:at=60"],
    "INCOMPLETE": [*SIM, "--minutes", "3"],
}
EXIT = {"PASS": 0, "FAIL": 1, "INCOMPLETE": 3}
GONE_AFTER = 3  # lines the reader takes before it closes its end, as `head -3` does
IMPORT = (
    "tests/fixtures/import/h100-f4f827dd-from-idle-head.csv.gz", "--time-col", "timestamp",
    "--time-unit", "iso", "--device-col", "gpu_index", "--map", "temp_c=temperature_C",
    "--map", "power_w=power_W",
)  # fmt: skip


def _soak(args: Sequence[str], stdout, stderr) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "soak", *args],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=stdout,
        stderr=stderr,
    )


def head(args: Sequence[str], err: Path | None = None) -> tuple[int, list[bytes]]:
    """``soak ARGS 2>&1 | head -3``, or with ``err`` ``soak ARGS 2>err | head -3``: the exit
    code, and the lines the reader got before it left."""
    with open(err or os.devnull, "wb") as stderr:
        proc = _soak(args, subprocess.PIPE, stderr if err else subprocess.STDOUT)
        assert proc.stdout is not None
        lines = [proc.stdout.readline() for _ in range(GONE_AFTER)]
        proc.stdout.close()  # the reader leaves: every later write fails with EPIPE
        return proc.wait(timeout=120), lines


def closed(args: Sequence[str]) -> int:
    """``soak ARGS`` with stdout and stderr on a pipe nobody reads from the start."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = _soak(args, write_end, write_end)
    finally:
        os.close(write_end)
    return proc.wait(timeout=120)


def _run_dir(out: Path) -> Path:
    (found,) = out.glob("*/*/summary.json")
    return found.parent


@pytest.fixture(scope="module")
def piped(tmp_path_factory) -> dict[str, tuple[int, list[bytes], Path]]:
    """A soak of each verdict piped to ``head -3``: its code, the lines read, its folder."""
    found = {}
    for verdict, args in VERDICTS.items():
        out = tmp_path_factory.mktemp(verdict)
        code, lines = head([*args, "--out", str(out)])
        found[verdict] = (code, lines, _run_dir(out))
    return found


@pytest.mark.parametrize("verdict", list(VERDICTS))
def test_a_soak_piped_to_head_exits_with_its_verdicts_code(piped, verdict):
    code, lines, run_dir = piped[verdict]
    assert len([line for line in lines if line]) == GONE_AFTER
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["verdict"] == verdict  # the run went on and wrote its report
    assert (run_dir / "report.html").is_file()
    assert code == EXIT[verdict]


def test_a_closed_stdout_leaves_no_traceback_on_stderr(tmp_path):
    err = tmp_path / "stderr.txt"
    code, _ = head([*VERDICTS["INCOMPLETE"], "--out", str(tmp_path)], err)
    assert code == 3 and (_run_dir(tmp_path) / "report.html").is_file()
    text = err.read_text()
    assert "Traceback" not in text and "Error" not in text and "internal error" not in text


def test_every_other_command_keeps_its_code_when_its_reader_leaves(piped, tmp_path):
    passed, failed = piped["PASS"][2], piped["FAIL"][2]
    fleet = tmp_path / "fleet"
    shutil.copytree(passed.parent, fleet / "node1")
    commands = [
        (["report", str(failed)], 1),
        (["compare", str(passed), str(failed), "--out", str(tmp_path / "c.html")], 0),
        (["devices", "--backend", "sim"], 0),
        (["import", "csv", *IMPORT, "--out", str(tmp_path / "imported")], 3),  # 1.7 min
        (["fleet", "report", str(fleet), "--no-history"], 0),
        (["fleet", "sbatch", "--nodes", "2", "--script", str(tmp_path / "s")], 0),
    ]  # fmt: skip
    for args, code in commands:
        assert closed(args) == code, args
