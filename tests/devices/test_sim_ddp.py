"""The simulated server runs ddp: the server's step is the slowest device's compute plus a
link-model all-reduce. An airflow fault on one device makes it the straggler, and the
reported step-rate loss matches the simulator's noise-free truth; a link fault slows the
all-reduce."""

from __future__ import annotations

import pytest

from soak.analysis.analyze import analyze
from soak.config import RunConfig, load_profile
from soak.runner import Runner, run
from soak.store import RunStore

pytestmark = pytest.mark.slow


def _run(tmp_path, minutes: float, *faults: str, seed: int = 1):
    loads = []

    def keep(runner: Runner, _progress) -> None:
        if not loads:
            loads.append(runner.load)

    config = RunConfig(
        backend="sim",
        workload="ddp",
        duration_s=minutes * 60,
        baseline_s=0.0,
        seed=seed,
        sim_faults=faults,
        out=tmp_path,
    )
    result = run(config, on_tick=keep)
    store = RunStore.open(result.run_dir)
    analysis = analyze(store, load_profile(None))
    store.close_read()
    return analysis, loads[0].sync


def test_an_airflow_fault_names_its_device_the_straggler_and_the_loss_matches_the_truth(
    tmp_path,
):
    analysis, sim = _run(tmp_path, 40, "airflow:gpu=3:factor=2.2")
    sync = analysis.sync
    assert sync is not None and sync.ranks == 8
    assert sync.pace_setter == 3 and sync.pace_share[3] > 0.8
    cold = sim.truth_rate(sync.cold_window.start_s, sync.cold_window.end_s)
    steady = sim.truth_rate(sync.steady_window.start_s, sync.steady_window.end_s)
    truth = 1.0 - steady / cold
    assert truth > 0.03  # the fault costs the server something to find
    assert sync.loss == pytest.approx(truth, abs=0.01)
    straggler = [c for c in analysis.checks if c.check == "straggler"]
    assert [(c.device, c.status.value) for c in straggler] == [(3, "warn")]


def test_a_link_fault_slows_the_all_reduce_and_no_fault_blames_no_device(tmp_path):
    analysis, _ = _run(tmp_path / "link", 3, "link:gpu=2:factor=0.5")
    healthy, _ = _run(tmp_path / "none", 3)
    assert analysis.sync.busbw_cold == pytest.approx(healthy.sync.busbw_cold * 0.5, rel=0.02)
    assert not [c for c in healthy.checks if c.check == "straggler" and c.status.value != "pass"]
