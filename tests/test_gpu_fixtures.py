"""Replays of what `make gpu-check` recorded on a real NVIDIA H200 (tests/fixtures/gpu/):
the stored traces go through the same analysis and report as a live run."""

import json
import shutil
from pathlib import Path

import pytest

from soak.model import ClockReason
from soak.report import build_outputs
from soak.store import STORE_NAME, RunStore

H200 = Path(__file__).parent / "fixtures" / "gpu" / "h200-2026-11-30"


def _rebuild(name: str, tmp_path: Path):
    run_dir = tmp_path / name
    run_dir.mkdir()
    shutil.copy(H200 / f"{name}.sqlite", run_dir / STORE_NAME)
    return build_outputs(run_dir)


@pytest.mark.slow
def test_gemm_trace_replays_to_the_figures_the_check_reported(tmp_path):
    analysis, report = _rebuild("gemm", tmp_path)
    recorded = json.loads((H200 / "gpu_check.json").read_text())["gemm"]
    device = analysis.devices[0]
    assert device.info.name == "NVIDIA H200" and device.info.power_limit_w == 700.0
    # gpu_check.json was written when the load started with the first step; it now starts
    # after it (the first step is warm-up), which moves the cold window by one step
    assert device.facts.cold.throughput["gemm"] == pytest.approx(recorded["cold"], rel=1e-3)
    assert 6.0e14 < device.facts.cold.throughput["gemm"] < 7.5e14  # bf16 at the power cap
    assert device.facts.cold.median["power_w"] == pytest.approx(690, abs=15)
    assert device.facts.verification_checked >= 3 and device.facts.verification_failed == 0
    # The cap is what holds this card: SW power cap set in most load ticks, no HW reason.
    assert device.facts.whole.reason_share["sw_power_cap"] > 0.5
    assert device.facts.whole.reason_share["hw_any"] == 0.0
    assert analysis.verdict == "PASS"
    assert {c.check for c in analysis.reasons} == {"equilibrium", "run_length"}  # 45 s of load
    assert report.is_file()


@pytest.mark.slow
def test_membw_trace_keeps_unreadable_metrics_unreadable(tmp_path):
    analysis, _ = _rebuild("membw", tmp_path)
    device = analysis.devices[0]
    assert device.facts.cold.throughput["membw"] == pytest.approx(4.3e12, rel=0.05)
    assert analysis.capabilities[0]["fan_pct"] == "not supported"
    assert analysis.capabilities[0]["retired_pages"] == "not supported"
    tele = RunStore.open(tmp_path / "membw").telemetry(0)
    assert not (tele["fan_pct"] == tele["fan_pct"]).any()  # all NaN: never read, never 0
    summary = json.loads((tmp_path / "membw" / "summary.json").read_text())
    counters = summary["devices"][0]["counters"]
    assert counters["retired_pages"] == {"first": None, "last": None, "peak": None}
    assert counters["ecc_uncorrected"]["last"] == 0


def test_recorded_reason_bits_decode():
    store = RunStore.open(H200 / "gemm.sqlite")
    bits = {int(b) for b in store.telemetry(0)["clock_reasons"] if b == b}
    assert bits <= {0, int(ClockReason.GPU_IDLE), int(ClockReason.SW_POWER_CAP)}
    assert int(ClockReason.SW_POWER_CAP) in bits
