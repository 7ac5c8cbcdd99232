"""Through the live runner on the simulated server: another process on a GPU is diagnosed as
such, never as a hardware fault; and the live view, the exporter's snapshot and the report
give one cold figure."""

from __future__ import annotations

import dataclasses
import io

import pytest

from soak.devices.sim import SimServer
from soak.live.view import PlainView, Tracker, device_line
from soak.model import Telemetry
from soak.pipeline import build_outputs
from soak.progress import Progress
from soak.runner import run
from tests.factories import any_length


class Last:
    """A watcher that keeps the last snapshot."""

    def __init__(self) -> None:
        self.progress: Progress | None = None

    def update(self, progress: Progress) -> None:
        self.progress = progress

    def close(self) -> None:
        pass


def test_another_process_on_a_gpu_is_named_and_leaves_the_device_incomplete(sim_config):
    last, stream = Last(), io.StringIO()
    config = sim_config(  # four minutes judged as if they were enough: not what is tested
        duration_s=240.0,
        sim_gpus=4,
        sim_faults=("contention:gpu=2:at=90:fraction=0.4",),
        profile=any_length(),
    )
    result = run(config, watchers=[last, PlainView(stream, Tracker())])
    analysis, report = build_outputs(result.run_dir, config.profile)
    by_index = {d.index: d for d in analysis.devices}
    assert analysis.verdict == "INCOMPLETE"
    assert {i: d.verdict for i, d in by_index.items()} == {
        0: "PASS", 1: "PASS", 2: "INCOMPLETE", 3: "PASS"
    }  # fmt: skip
    gpu = by_index[2]
    assert gpu.diagnosis == "another process on the device"
    assert all(d.diagnosis != "hardware-fault" for d in analysis.devices)
    incomplete = [c for c in gpu.checks if c.status == "incomplete"]
    assert {c.check for c in incomplete} == {"throughput_retention", "outlier"}
    assert all(
        "another process on the device: pid 4242 (python3), 8192 MiB, during" in c.message
        and c.message.endswith("rerun on an idle host")
        for c in incomplete
    )
    html = report.read_text()
    assert "RMA" not in html
    assert "<b>2 incomplete checks</b> (something else used the device)" in html
    # the live run saw it too: the process in the messages, its count in the snapshot
    assert "device 2: another process on the device: pid 4242 (python3)" in stream.getvalue()
    assert last.progress is not None
    assert last.progress.device(2).telemetry.foreign_procs == 1
    assert last.progress.device(0).telemetry.foreign_procs == 0


def test_the_live_cold_figure_is_the_reports(sim_config):
    last, view = Last(), PlainView(io.StringIO(), Tracker())
    config = sim_config(duration_s=180.0, sim_gpus=2, workload="mix")
    result = run(config, watchers=[last, view])
    analysis, _ = build_outputs(result.run_dir, config.profile)
    assert last.progress is not None
    for d in analysis.devices:
        live = {r.part: r.rate for r in last.progress.device(d.index).cold}
        assert d.facts.cold is not None
        assert live == pytest.approx(d.facts.cold.throughput, rel=1e-12)
        assert set(live) == {"gemm", "membw", "train"}
    # the live line's "% of cold" is the latest rate over the report's cold figure
    device = last.progress.device(0)
    latest = {r.part: r.rate for r in device.rates}
    cold = analysis.devices[0].facts.cold.throughput
    line = device_line(view.tracker, device)
    assert f"({100 * latest['train'] / cold['train']:.1f} % of cold)" in line


class BusyHost(SimServer):
    """The simulated server on a host that other work keeps half busy from before soak
    starts: each reading's foreign load is 50 %, as the CPU backend reads it."""

    def sample(self, t_s: float) -> list[Telemetry]:
        return [dataclasses.replace(r, foreign_load_pct=50.0) for r in super().sample(t_s)]


def test_a_host_busy_from_the_first_second_is_named_live_and_in_the_verdict(sim_config):
    stream = io.StringIO()
    config = sim_config(duration_s=240.0, sim_gpus=1, profile=any_length())
    result = run(config, backend=BusyHost(gpus=1), watchers=[PlainView(stream, Tracker())])
    analysis, report = build_outputs(result.run_dir, config.profile)
    said = [line for line in stream.getvalue().splitlines() if "host contention" in line]
    assert len(said) == 1 and said[0].split(" ", 1)[1] == (
        "baseline device 0: host contention: other work used 50 % of the host's CPU time "
        "before the load started (soak's own processes left out); figures taken beside it are "
        "not the device's alone"
    )
    (named,) = [c for c in analysis.reasons if c.check == "contention"]
    assert named.message.startswith(
        "host contention: other work used 50 % of the host's CPU time during 100 % of the "
        "load, from the load's first seconds"
    )
    assert "before the load started" in report.read_text()  # the event log has it too
