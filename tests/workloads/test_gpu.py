"""The CUDA paths: every GEMM dtype, membw, train and mix on a real GPU, and a pool worker
pinned through its environment. Skipped where torch sees no CUDA device."""

from __future__ import annotations

import dataclasses
import time

import pytest
import torch

from soak.model import DeviceInfo, EventKind, WorkerOutcome
from soak.worker import WorkerPool
from tests.workloads.sizes import TINY_TRAIN
from workloads import WorkloadOptions
from workloads.gemm import GemmWorkload
from workloads.membw import MembwWorkload
from workloads.mix import MixWorkload
from workloads.train import TrainWorkload

pytestmark = pytest.mark.gpu

SMALL = WorkloadOptions(step_s=0.2, gemm_n=2048, gemm_ring=4, membw_bytes=256 << 20)


@pytest.mark.parametrize("dtype", [None, "bf16", "fp16", "tf32", "fp32", "fp64", "fp8"])
def test_gemm_checks_pass_clean_and_catch_corruption(dtype: str | None) -> None:
    gemm = GemmWorkload(dataclasses.replace(SMALL, dtype=dtype))
    gemm.setup("cuda:0", 0)
    result = gemm.step()
    assert result.parts[0].work > 0 and result.t_end > result.t_start
    (check,) = gemm.verify()
    assert check.ok, check
    assert gemm.last is not None
    gemm.outputs[gemm.last[2]][7, 7] = 1e4
    (check,) = gemm.verify()
    assert not check.ok and check.mismatched == 1
    gemm.close()


def test_gemm_checksum_repeats_on_one_gpu() -> None:
    first, second = GemmWorkload(SMALL), GemmWorkload(SMALL)
    first.setup("cuda:0", 1)
    second.setup("cuda:0", 2)
    assert first.checksum() == second.checksum() is not None
    assert first.describe()["dtype"] in ("bf16", "fp16")


def test_default_sizes_fill_the_memory_share() -> None:
    gemm = GemmWorkload(WorkloadOptions(mem_fraction=0.1, step_s=0.5))
    gemm.setup("cuda:0", 0)
    total = torch.cuda.get_device_properties(0).total_memory
    held = gemm.describe()["held_b"]
    assert 0.05 * total < held <= 0.1 * total
    gemm.step()
    assert all(c.ok for c in gemm.verify())
    gemm.close()


def test_membw_checks_pass_clean_and_catch_corruption() -> None:
    membw = MembwWorkload(SMALL)
    membw.setup("cuda:0", 0)
    assert membw.step().parts[0].work > 0
    (check,) = membw.verify()
    assert check.ok, check
    membw.c[0][99] += 1.0
    (check,) = membw.verify()
    assert not check.ok and check.mismatched == 1


def test_train_learns_with_bf16_autocast_and_catches_poison() -> None:
    options = dataclasses.replace(SMALL, train_loader_workers=1, **TINY_TRAIN)
    train = TrainWorkload(options)
    train.setup("cuda:0", 0)
    while train.opt_steps < 120:
        train.step()
    assert all(c.ok for c in train.verify())
    with torch.no_grad():
        train.model.tok.weight[0, 0] = float("nan")
    (check,) = train.step().verifications
    assert not check.ok
    train.close()


def test_mix_runs_parts_concurrently() -> None:
    options = dataclasses.replace(SMALL, train_loader_workers=1, **TINY_TRAIN)
    mix = MixWorkload(options)
    mix.setup("cuda:0", 0)
    result = mix.step()
    # overlapping parts have no time of their own: one rate for the mix, in GEMM FLOP
    assert [(p.part, p.unit) for p in result.parts] == [("mix", "FLOP")]
    assert result.parts[0].work > 0 and result.parts[0].t_start is None
    assert mix.describe()["concurrent_streams"] is True
    assert "concurrently" in mix.describe()["rates"]
    assert all(c.ok for c in mix.verify())
    mix.close()


def test_pool_worker_pinned_by_environment() -> None:
    device = DeviceInfo(
        index=3,
        backend="nvml",
        name=torch.cuda.get_device_name(0),
        torch_device="cuda:0",
        worker_env={"CUDA_VISIBLE_DEVICES": "0"},
    )
    pool = WorkerPool([device], "gemm", SMALL, heartbeat_timeout_s=30)
    t0 = time.monotonic()
    pool.start(t0)
    samples = []
    deadline = time.monotonic() + 60
    while len(samples) < 5 and time.monotonic() < deadline:
        time.sleep(0.2)
        samples += pool.poll(time.monotonic() - t0).samples
    update = pool.stop(time.monotonic() - t0)
    assert len(samples) >= 5 and all(s.device == 3 for s in samples)
    (outcome,) = [e for e in update.events if e.kind is EventKind.WORKER_OUTCOME]
    assert outcome.details["outcome"] == WorkerOutcome.OK
