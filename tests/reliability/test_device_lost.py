"""A device lost mid-run, as NVML reports it ("GPU is lost") and as the simulated server
does (XID 79): that device fails with the cause named, the others go on to the end."""

from __future__ import annotations

import dataclasses
import json

from soak.cli import main
from soak.clock import WallClock
from soak.devices.nvml import NvmlBackend
from soak.model import DeviceInfo, EventKind
from soak.pipeline import build_outputs
from soak.runner import run
from soak.store import RunStore
from tests.devices.fake_pynvml import FakeNvml, baseline_gpu
from tests.reliability.fakes import LOST_FLAG
from tests.reliability.helpers import Hook, outcome_events, run_config


class OnCpu:
    """An NVML backend (on a fake pynvml) whose devices run their load on the CPU, so that
    real worker processes stand in for the GPUs' CUDA contexts."""

    def __init__(self, backend: NvmlBackend, flags: dict[int, str]) -> None:
        self._backend = backend
        self._flags = flags
        self.name = backend.name

    def devices(self) -> list[DeviceInfo]:
        return [
            dataclasses.replace(d, torch_device="cpu", worker_env={LOST_FLAG: self._flags[d.index]})
            for d in self._backend.devices()
        ]

    def __getattr__(self, name: str):
        return getattr(self._backend, name)


def test_gpu_lost_in_nvml_fails_that_device_and_the_others_finish(
    tmp_path, profile, monkeypatch, sleeper_pool
):
    fake = FakeNvml([baseline_gpu(i) for i in range(3)])
    monkeypatch.setattr("soak.devices.nvml.pynvml", fake)
    flags = {i: str(tmp_path / f"lost-{i}") for i in range(3)}
    backend = OnCpu(NvmlBackend(event_wait_ms=10), flags)

    def lose_gpu_1(runner, t_s):
        fake.lose(1)  # NVML: every call on it now fails with "GPU is lost"
        open(flags[1], "w").close()  # ...and so does CUDA, in its worker

    hook = Hook(lose_gpu_1)
    result = run(run_config(tmp_path, profile), backend=backend, clock=WallClock(), on_tick=hook)
    assert result.stop_reason == "duration"

    store = RunStore.open(result.run_dir)
    lost = [e for e in store.events() if e.kind is EventKind.DEVICE_LOST]
    assert [e.device for e in lost] == [1]
    assert outcome_events(store)[1]["outcome"] == "device lost"
    assert "GPU is lost" in outcome_events(store)[1]["exception"]
    assert store.telemetry(1)["t_s"].max() < lost[0].t_s
    for healthy in (0, 2):
        assert store.telemetry(healthy)["t_s"].max() > lost[0].t_s + 2.0
        assert store.work(healthy)["gemm"]["t_end_s"].max() > lost[0].t_s + 2.0
    store.close_read()

    analysis, _ = build_outputs(result.run_dir)
    assert analysis.devices[1].verdict == "FAIL"
    assert analysis.devices[1].diagnosis == "hardware-fault"
    worker = [c for c in analysis.devices[1].checks if c.check == "worker"]
    assert worker and "lost" in worker[0].message
    assert [d.verdict for d in analysis.devices if d.index != 1] == ["PASS", "PASS"]


def test_a_run_whose_every_device_is_lost_stops_rather_than_soak_nothing(
    tmp_path, profile, monkeypatch, sleeper_pool
):
    """The workers run on (their load does not touch NVML), but no device answers: the run
    stops with what it has instead of heating nothing for the rest of its hour."""
    fake = FakeNvml([baseline_gpu(i) for i in range(2)])
    monkeypatch.setattr("soak.devices.nvml.pynvml", fake)
    backend = OnCpu(NvmlBackend(event_wait_ms=10), {0: "", 1: ""})

    def lose_both(runner, t_s):
        fake.lose(0)
        fake.lose(1)

    hook = Hook(lose_both)
    config = run_config(tmp_path, profile, duration_s=3600.0)
    result = run(config, backend=backend, clock=WallClock(), on_tick=hook)
    assert result.stop_reason == "error"
    assert hook.acted_at is not None and hook.ticks[-1] < hook.acted_at + 1.0
    store = RunStore.open(result.run_dir)
    assert {e.device for e in store.events() if e.kind is EventKind.DEVICE_LOST} == {0, 1}
    # Their workers did nothing wrong and were stopped as at any end.
    assert {d["outcome"] for d in outcome_events(store).values()} == {"ok"}
    store.close_read()


def test_xid_79_in_the_simulated_server_fails_that_gpu_and_the_run_completes(tmp_path, capsys):
    code = main(
        [
            "run", "--backend", "sim", "--workload", "gemm", "--minutes", "20", "--seed", "3",
            "--sim-gpus", "4", "--sim-fault", "xid:gpu=2:code=79:at=300", "--out", str(tmp_path),
        ]
    )  # fmt: skip
    assert code == 1  # FAIL
    report = capsys.readouterr().out.strip().splitlines()[-1]
    summary = json.loads((tmp_path.glob("*/*/summary.json").__next__()).read_text())
    assert report.endswith("report.html")
    assert summary["run"]["stop_reason"] == "duration"
    verdicts = {d["index"]: d["verdict"] for d in summary["devices"]}
    assert verdicts == {0: "PASS", 1: "PASS", 2: "FAIL", 3: "PASS"}
    reasons = [r for r in summary["reasons"] if r["device"] == 2 and r["status"] == "fail"]
    messages = " / ".join(r["message"] for r in reasons)
    assert "79" in messages and "lost" in messages
