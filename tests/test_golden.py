"""A fixed seeded run, judged end to end, against its recorded outcome: the summary (every
figure, reason and verdict) and the report's visible text. A change of structure must leave
both as they are; a change of behaviour updates them on purpose, in the same commit:

    SOAK_UPDATE_GOLDEN=1 pytest tests/test_golden.py

and the diff of tests/fixtures/golden/ shows what the change did to what an operator reads.
"""

from __future__ import annotations

import json
import os
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from soak.config import RunConfig
from soak.report import build_outputs
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


def test_a_fixed_seeded_run_gives_its_recorded_summary_and_report(tmp_path):
    config = RunConfig(
        backend="sim",
        workload="mix",
        duration_s=1800.0,
        seed=11,
        out=tmp_path,
        sim_gpus=4,
        sim_faults=("airflow:gpu=2:factor=2.2", "ecc:gpu=3:at=600"),
        command="soak run --backend sim --minutes 30 --sim-gpus 4 --seed 11",
    )
    run_dir = run(config).run_dir
    build_outputs(run_dir, config.profile)
    summary = _steady(json.loads((run_dir / "summary.json").read_text()))
    text = visible_text((run_dir / "report.html").read_text())
    text = text.replace(str(tmp_path), "<out>").replace(run_dir.parent.name, "<host>")
    text = text.replace(run_dir.name, "<stamp>")
    if os.environ.get("SOAK_UPDATE_GOLDEN"):
        GOLDEN.mkdir(parents=True, exist_ok=True)
        (GOLDEN / "summary.json").write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
        (GOLDEN / "report.txt").write_text(text + "\n")
    assert summary == json.loads((GOLDEN / "summary.json").read_text())
    assert text + "\n" == (GOLDEN / "report.txt").read_text()
