"""The ddp workload on the CPU backend with real gloo ranks: a rank killed (SIGKILL) or
stopped (SIGSTOP) ends the run with a report naming it, within the heartbeat timeout plus
30 s, keeping every sample and leaving no process; a rank whose replica drifts is named by
the checksum check."""

from __future__ import annotations

import json
import os
import signal
import time

import numpy as np
import pytest

from soak.clock import WallClock
from soak.pipeline import build_outputs
from soak.runner import Runner, run
from soak.store import RunStore
from tests.reliability.helpers import Hook, outcome_events, run_config, workers

pytestmark = pytest.mark.slow

HEARTBEAT_S = 10.0  # the ranks' collective timeout is half of it
# A model as small as it goes: one iteration takes milliseconds on one thread.
TINY = {
    "train_batch": 2,
    "train_seq": 16,
    "train_width": 32,
    "train_layers": 1,
    "train_heads": 2,
    "train_vocab": 64,
    "step_s": 0.1,
    "ddp_allreduce_mib": 0.25,
    "cpu_threads": 1,
}


def _config(tmp_path, profile, ranks: int, duration_s: float, **options):
    return run_config(
        tmp_path,
        profile,
        workload="ddp",
        ranks=ranks,
        duration_s=duration_s,
        heartbeat_timeout_s=HEARTBEAT_S,
        workload_options={**TINY, **options},
    )


class Strike:
    """Signals rank 1's worker once every rank works; notes when."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.at: float | None = None

    def __call__(self, runner: Runner, t_s: float) -> None:
        self.at = time.monotonic()
        os.kill(runner.load.worker_pids()[1], self.signum)


@pytest.mark.parametrize(
    ("signum", "outcome"), [(signal.SIGKILL, "crashed"), (signal.SIGSTOP, "hung")]
)
def test_a_lost_rank_ends_the_run_naming_it_and_keeps_every_step(
    tmp_path, profile, signum, outcome
):
    strike = Strike(signum)
    config = _config(tmp_path, profile, ranks=2, duration_s=600.0)
    result = run(config, clock=WallClock(), on_tick=Hook(strike, after_s=1.0))
    ended = time.monotonic()
    assert strike.at is not None
    assert ended - strike.at < HEARTBEAT_S + 30  # not the 600 s asked for
    assert not workers(os.getpid())  # no rank left behind

    store = RunStore.open(result.run_dir)
    outcomes = outcome_events(store)
    assert outcomes[1]["outcome"] == outcome
    assert outcomes[0]["outcome"] == "peer lost"
    for device in (0, 1):  # the steps done before the strike are kept, per rank
        assert len(store.sync_steps(device)["step_s"]) >= 3
        assert len(store.work(device)["ddp"]["work"]) >= 3
    assert len(store.server_steps()["samples"]) >= 3
    store.close_read()

    build_outputs(result.run_dir)
    summary = json.loads((result.run_dir / "summary.json").read_text())
    assert summary["verdict"] == "FAIL"
    verdicts = {d["index"]: d["verdict"] for d in summary["devices"]}
    assert verdicts[1] == "FAIL"
    reasons = {(r["device"], r["check"]): r for r in summary["reasons"]}
    assert outcome in reasons[1, "worker"]["message"]
    assert reasons[0, "worker"]["status"] == "warn"
    assert "another rank was lost" in reasons[0, "worker"]["message"]


def test_a_rank_whose_replica_drifts_is_named_by_the_checksum(tmp_path, profile):
    config = _config(
        tmp_path, profile, ranks=3, duration_s=8.0, ddp_perturb_rank=2, verify_interval_s=0.3
    )
    result = run(config, clock=WallClock())
    store = RunStore.open(result.run_dir)
    outcomes = {d: o["outcome"] for d, o in outcome_events(store).items()}
    store.close_read()
    # every rank left after the same step at stop: none waits on a peer that has gone
    assert outcomes == {0: "ok", 1: "ok", 2: "verification failed"}
    build_outputs(result.run_dir)
    summary = json.loads((result.run_dir / "summary.json").read_text())
    verdicts = {d["index"]: d["verdict"] for d in summary["devices"]}
    assert verdicts[2] == "FAIL"
    messages = [r["message"] for r in summary["reasons"] if r["device"] == 2]
    assert any("replicas differ after step" in m and "rank 2" in m for m in messages), messages
    for device in (0, 1):
        assert not [
            r for r in summary["reasons"] if r["device"] == device and "replicas" in r["message"]
        ]
    assert not workers(os.getpid())


def test_a_killed_rank_of_lock_step_mix_ends_the_run_keeping_every_device_s_steps(
    tmp_path, profile
):
    strike = Strike(signal.SIGKILL)
    options = {**TINY, **MIX, "mix_sync": True}
    config = run_config(
        tmp_path,
        profile,
        workload="mix",
        ranks=2,
        duration_s=600.0,
        heartbeat_timeout_s=HEARTBEAT_S,
        workload_options=options,
    )
    result = run(config, clock=WallClock(), on_tick=Hook(strike, after_s=1.0))
    assert strike.at is not None and time.monotonic() - strike.at < HEARTBEAT_S + 30
    assert not workers(os.getpid())
    store = RunStore.open(result.run_dir)
    outcomes = outcome_events(store)
    assert (outcomes[1]["outcome"], outcomes[0]["outcome"]) == ("crashed", "peer lost")
    for device in (0, 1):
        assert len(store.sync_steps(device)["step_s"]) >= 3
        assert set(store.work(device)) == {"gemm", "membw", "train"}
    store.close_read()
    build_outputs(result.run_dir)
    assert (result.run_dir / "report.html").exists()


def test_one_rank_skips_the_all_reduce_and_the_report_says_why(tmp_path, profile):
    result = run(_config(tmp_path, profile, ranks=1, duration_s=4.0), clock=WallClock())
    _, report = build_outputs(result.run_dir)
    summary = json.loads((result.run_dir / "summary.json").read_text())
    ddp = summary["server"]["ddp"]
    assert ddp["ranks"] == 1 and ddp["steps"] >= 3
    assert ddp["busbw_cold_Bps"] is None and ddp["allreduce_b"] is None
    assert ddp["busbw_note"] == "one rank: no all-reduce to time (nothing to reduce across)"
    html = report.read_text()
    assert "all-reduce bus bandwidth: skipped (one rank: no all-reduce to time" in html
    assert "synchronous step rate" in html
    assert not workers(os.getpid())


MIX = {"gemm_n": 64, "gemm_ring": 4, "membw_bytes": 1 << 20, "train_loader_workers": 0}


def test_lock_step_mix_keeps_each_devices_rates_its_own_with_a_slow_rank(tmp_path, profile):
    # mix_sync: the training part is the ddp step; rank 1 idles 3 calibrated iterations
    # before each backward (a slow device), so rank 0 waits for it in every iteration's
    # gradient all-reduce. Rank 0's rates must not carry that wait.
    slow = {"ddp_slow_rank": 1, "ddp_slowdown": 3.0}
    options = {**TINY, **MIX, **slow, "mix_sync": True, "step_s": 0.2}
    config = run_config(
        tmp_path,
        profile,
        workload="mix",
        ranks=2,
        duration_s=8.0,
        heartbeat_timeout_s=HEARTBEAT_S,
        workload_options=options,
    )
    result = run(config, clock=WallClock())
    store = RunStore.open(result.run_dir)
    assert {d: o["outcome"] for d, o in outcome_events(store).items()} == {0: "ok", 1: "ok"}
    server = store.server_steps()
    assert len(server["samples"]) >= 5  # the server row's steps, as for ddp
    assert np.mean(server["straggler"] == 1) > 0.8  # the slow rank sets the pace
    steps = {d: store.sync_steps(d) for d in (0, 1)}
    waited = {d: float(np.sum(s["wait_s"])) / float(np.sum(s["step_s"])) for d, s in steps.items()}
    # rank 0 waits for rank 1 (about half its steps' time; rank 1 a tenth, in the link and
    # the host's load: 0.48-0.65 against 0.07-0.10 beside three busy loops on two cores)
    assert waited[0] > 0.0 and waited[0] > waited[1]

    def train_rate(device: int) -> float:
        w = store.work(device)["train"]
        return float(np.sum(w["work"]) / np.sum(w["t_end_s"] - w["t_start_s"]))

    def lock_step_rate(device: int) -> float:  # the training tokens over their whole block
        w = store.work(device)["train"]
        spans = w["t_end_s"] - w["t_start_s"]
        raw = w["work"] * (spans - steps[device]["wait_s"]) / spans  # the wait put back
        return float(np.sum(raw) / np.sum(spans))

    # rank 0's training rate is its own pace: well above what it did with the waiting
    # counted in, and above the slow rank's (which trains 4 times as long)
    rates = (train_rate(0), lock_step_rate(0), train_rate(1))
    assert rates[0] > 1.15 * rates[1], rates
    assert rates[0] > 1.2 * rates[2], rates
    store.close_read()
    build_outputs(result.run_dir)
    summary = json.loads((result.run_dir / "summary.json").read_text())
    ddp = summary["server"]["ddp"]
    assert ddp is not None and ddp["ranks"] == 2 and ddp["pace_setter"] == 1
    assert not workers(os.getpid())
