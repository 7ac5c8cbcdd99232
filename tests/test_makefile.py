"""The make targets a new user types first: their last lines and exit status."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import worker_group

REPO = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def _fake_venv(tmp_path: Path, exit_code: int) -> Path:
    """A venv whose ``soak`` and ``pytest`` print their arguments and exit with ``exit_code``,
    marked installed so that make runs only the target's own recipe."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    for tool in ("soak", "pytest"):
        script = venv / "bin" / tool
        script.write_text(
            "#!/bin/sh\n"
            f'echo "{tool} $*"\n'
            'echo "verdict: FAIL (8 devices, stop: duration)"\n'
            'echo "reports/host/stamp/report.html"\n'
            f"exit {exit_code}\n"
        )
        script.chmod(0o755)
    stamp = (REPO / "pyproject.toml").stat().st_mtime + 1  # installed after the last change
    (venv / ".installed").touch()
    os.utime(venv / ".installed", (stamp, stamp))
    return venv


def _make(target: str, venv: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "--no-print-directory", "-C", str(REPO), target, f"VENV={venv}"],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("target", ["soak", "demo"])
def test_a_fail_verdict_ends_with_the_report_path_not_a_make_error(
    tmp_path: Path, target: str
) -> None:
    done = _make(target, _fake_venv(tmp_path, 1))
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert done.returncode == 0
    assert lines[-2:] == [
        "verdict: FAIL (8 devices, stop: duration)",
        "reports/host/stamp/report.html",
    ]
    assert "Error" not in done.stderr


@pytest.mark.parametrize("code", [2, 3])
def test_bad_input_and_incomplete_runs_stay_make_errors(tmp_path: Path, code: int) -> None:
    done = _make("soak", _fake_venv(tmp_path, code))
    assert done.returncode != 0
    assert f"Error {code}" in done.stderr


def test_make_test_prints_skip_reasons(tmp_path: Path) -> None:
    done = _make("test", _fake_venv(tmp_path, 0))
    flags = done.stdout.splitlines()[-3].split()[1:]
    assert flags[0] == "-q" and "s" in flags[1] and flags[1].startswith("-r")  # s: skips


def test_make_test_runs_two_workers_each_on_whole_groups(tmp_path: Path) -> None:
    done = _make("test", _fake_venv(tmp_path, 0))
    flags = done.stdout.splitlines()[-3].split()
    assert flags[flags.index("-n") + 1] == "2" and flags[flags.index("--dist") + 1] == "loadscope"
    # the groups a worker runs whole: a module, the reports' shared runs, the reliability tests
    assert worker_group("tests/test_cli.py::test_x[a::b]") == "tests/test_cli.py"
    assert worker_group("tests/devices/test_sim.py::Class::test_x") == "tests/devices/test_sim.py"
    assert worker_group("tests/report/test_html.py::test_x") == "tests/report/"
    assert worker_group("tests/reliability/test_ddp.py::test_x[9]") == "tests/reliability/"
