"""A fixed seeded run, judged end to end, against its recorded outcome: the summary (every
figure, reason and verdict) and the report's visible text. A change of structure must leave
both as they are; a change of behaviour updates them on purpose, in the same commit:

    SOAK_UPDATE_GOLDEN=1 pytest tests/test_golden.py

and the diff of tests/fixtures/golden/ shows what the change did to what an operator reads.

The run is recorded as made on a fixed host (GOLDEN_HOST), whatever machine runs the test:
the report's inventory prints the host's CPU, kernel and versions, and a golden text holding
the recording machine's fails on any other (an AMD host against an Intel recording).
"""

from __future__ import annotations

import json
import os
import platform
import re
import sqlite3
from html.parser import HTMLParser
from pathlib import Path

import pytest

from soak import runner, store
from soak.config import RunConfig
from soak.pipeline import build_outputs
from soak.runner import run

pytestmark = pytest.mark.slow
GOLDEN = Path(__file__).parent / "fixtures" / "golden"
# What differs between two runs of the same seed: when, where and with which versions.
VOLATILE = {"started_utc", "command", "host", "soak_version", "hostname", "os", "python",
            "numpy", "torch", "nvidia_ml_py", "cpu", "cpu_count", "soak", "path"}  # fmt: skip


def _steady(value):
    """The summary without its volatile keys; floats to 9 significant digits (the last bits
    of a float may differ between numpy builds, not between runs)."""
    if isinstance(value, dict):
        return {k: _steady(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [_steady(v) for v in value]
    if isinstance(value, float):
        return float(f"{value:.9g}")
    return value


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag, attrs):
        self._skip += tag in ("script", "style")

    def handle_endtag(self, tag):
        self._skip -= tag in ("script", "style")

    def handle_data(self, data):
        if not self._skip and data.strip():
            self.parts.append(" ".join(data.split()))


def visible_text(html: str) -> str:
    parser = _Text()
    parser.feed(html)
    text = "\n".join(parser.parts)
    text = re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", "<time>", text)
    text = re.sub(r"soak \d+\.\d+\.\d+\S*", "soak <version>", text)
    return re.sub(r"(/[\w.-]+)+/\d{8}T\d{6}Z\S*", "<run dir>", text)


# The host the golden outputs are recorded on; no fact of the machine running the test may
# reach them.
GOLDEN_HOST = {
    "hostname": "golden-host",
    "os": "GoldenOS-1.0-test",
    "cpu": "Golden Test CPU @ 1.00GHz",
    "cpu_count": "64",
    "python": "3.11.0",
    "soak": "0.0.0",
    "torch": "2.0.0+golden",
    "nvidia_ml_py": "12.0.0",
    "numpy": "2.0.0",
}


def _host_facts(host: dict) -> list[str]:
    """The strings a report would print of a host: its name, OS, CPU and CPU count."""
    facts = [host.get("hostname"), host.get("os"), host.get("cpu")]
    if host.get("cpu_count") != GOLDEN_HOST["cpu_count"]:
        facts.append(f"({host.get('cpu_count')} logical CPUs)")
    return [f for f in facts if f and len(f) >= 4]


def _this_host() -> list[str]:
    return [*_host_facts(runner.host_info()), platform.release(), platform.node()]


def _outputs(run_dir: Path, tmp: Path) -> tuple[dict, str, str]:
    """The run's summary (volatile keys out), the report's visible text, and the raw summary."""
    build_outputs(run_dir)
    raw = (run_dir / "summary.json").read_text()
    text = visible_text((run_dir / "report.html").read_text())
    text = text.replace(str(tmp), "<out>").replace(run_dir.parent.name, "<host>")
    return _steady(json.loads(raw)), text.replace(run_dir.name, "<stamp>"), raw


def _leaked(facts: list[str], *texts: str) -> list[str]:
    return [f for f in facts if f and len(f) >= 4 and any(f in t for t in texts)]


def _golden(tmp: Path, block_rows: int | None = None) -> Path:
    """The golden run's folder, its store packed into blocks of ``block_rows`` rows (None: as
    soak packs them, which a 30-minute run never fills)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(runner, "host_info", lambda: dict(GOLDEN_HOST))
        patch.setattr(runner, "run_host", lambda: GOLDEN_HOST["hostname"])
        if block_rows is not None:
            patch.setattr(store, "BLOCK_ROWS", block_rows)
        config = RunConfig(
            backend="sim",
            workload="mix",
            duration_s=1800.0,
            seed=11,
            out=tmp,
            sim_gpus=4,
            sim_faults=("airflow:gpu=2:factor=2.2", "ecc:gpu=3:at=600"),
            command="soak run --backend sim --minutes 30 --sim-gpus 4 --seed 11",
        )
        run_dir = run(config).run_dir
        build_outputs(run_dir, config.profile)
    return run_dir


@pytest.fixture(scope="module")
def golden_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("golden")
    return _golden(tmp), tmp


def test_a_fixed_seeded_run_gives_its_recorded_summary_and_report(golden_run):
    run_dir, tmp = golden_run
    summary, text, raw = _outputs(run_dir, tmp)
    if os.environ.get("SOAK_UPDATE_GOLDEN"):
        GOLDEN.mkdir(parents=True, exist_ok=True)
        (GOLDEN / "summary.json").write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
        (GOLDEN / "report.txt").write_text(text + "\n")
    assert _leaked(_this_host(), text, raw) == [], "a fact of the machine running the test leaked"
    assert summary == json.loads((GOLDEN / "summary.json").read_text())
    assert text + "\n" == (GOLDEN / "report.txt").read_text()


def test_the_golden_comparison_fails_on_another_hosts_facts(golden_run):
    """Fed another host (the store's host record replaced, the report rebuilt), the golden
    comparison fails and the leak check names that host's CPU and OS."""
    run_dir, tmp = golden_run
    other = {**GOLDEN_HOST, "hostname": "epyc-node-07", "os": "Linux-6.1.0-amd64-x86_64",
             "cpu": "AMD EPYC 9654 96-Core Processor", "cpu_count": "2"}  # fmt: skip
    with sqlite3.connect(run_dir / "soak.sqlite") as conn:
        conn.execute("UPDATE meta SET value=? WHERE key='host'", (json.dumps(other),))
    try:
        _, text, raw = _outputs(run_dir, tmp)
        assert text + "\n" != (GOLDEN / "report.txt").read_text()
        assert set(_leaked(_host_facts(other), text, raw)) >= {other["cpu"], other["os"]}
    finally:
        with sqlite3.connect(run_dir / "soak.sqlite") as conn:
            conn.execute("UPDATE meta SET value=? WHERE key='host'", (json.dumps(GOLDEN_HOST),))
        build_outputs(run_dir)


def test_the_golden_run_stored_in_blocks_gives_the_same_summary_and_report(tmp_path):
    """Store version 3 packs each device's rows into column blocks: the golden run packed
    every 97 rows (its telemetry, work and ddp-less tails in blocks of all sizes, some
    rows left in the tail) is judged and reported exactly as the rows it was packed from."""
    run_dir = _golden(tmp_path, block_rows=97)
    with sqlite3.connect(run_dir / "soak.sqlite") as conn:
        (packed,) = conn.execute("SELECT COALESCE(SUM(rows), 0) FROM telemetry_blocks").fetchone()
        (left,) = conn.execute("SELECT COUNT(*) FROM telemetry").fetchone()
    assert packed > 20 * left > 0
    summary, text, _ = _outputs(run_dir, tmp_path)
    assert summary == json.loads((GOLDEN / "summary.json").read_text())
    assert text + "\n" == (GOLDEN / "report.txt").read_text()
