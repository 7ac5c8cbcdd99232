"""Whole real traces (bench/data/real-traces): slow, skipped where the folder is missing."""

import json
from pathlib import Path

import pytest

from soak.cli import main
from testkit.traces import missing_reason, trace_dir
from tests.importers.conftest import run_folders

NAME = "v100x4-gpuburn-18h-lambda"
V100 = trace_dir(NAME) or Path(NAME)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not V100.is_dir(), reason=missing_reason(NAME)),
]


def test_raw_gpu_burn_log_imports_all_four_gpus_over_18_hours(tmp_path, capsys):
    """120 MB of \\r-separated records in a zip, streamed; time rebuilt from the counters
    ends where the derived CSV's does (64,788 s)."""
    out = tmp_path / "reports"
    code = main(
        ["import", "gpu-burn", str(V100 / "raw" / "104-171-200-39_gpu_temp.zip"), "--out", str(out)]
    )
    text = capsys.readouterr().out
    assert code in (0, 1)
    assert "load segment: 0.0 s to 64788.3 s (throughput)" in text
    (run_dir,) = run_folders(out)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert [d["index"] for d in summary["devices"]] == [0, 1, 2, 3]
    assert summary["run"]["duration_s"] == pytest.approx(64788.3, abs=0.5)
    for device in summary["devices"]:
        cold = device["cold"]["throughput"]["gemm"]
        assert 12.3e12 < cold < 12.9e12  # PROVENANCE: 12,568–12,607 Gflop/s over 10–60 s
    assert text.strip().splitlines()[-1] == str(run_dir / "report.html")
