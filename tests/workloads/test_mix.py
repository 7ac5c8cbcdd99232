"""mix: three parts reported separately, each over its own time; each part's checks still
bite."""

from __future__ import annotations

import pytest

from soak.worker import free_port
from soak.worker.child import _Channel, _SampleBatch
from tests.workloads.sizes import on_cpu
from workloads import WorkloadOptions
from workloads.mix import MixWorkload


def test_step_reports_each_part_with_its_unit(tiny: WorkloadOptions) -> None:
    mix = on_cpu(MixWorkload, tiny)
    result = mix.step()
    units = {p.part: p.unit for p in result.parts}
    assert units == {"gemm": "FLOP", "membw": "B", "train": "token"}
    assert all(p.work > 0 for p in result.parts)
    assert mix.checksum() == mix.gemm.checksum() is not None
    checks = mix.verify()
    assert {c.part for c in checks} == {"gemm", "membw", "train"}
    assert all(c.ok for c in checks), checks


def test_corrupted_gemm_output_fails_only_gemm(tiny: WorkloadOptions) -> None:
    mix = on_cpu(MixWorkload, tiny)
    mix.step()
    assert mix.gemm.last is not None
    mix.gemm.outputs[mix.gemm.last[2]][0, 0] = -1e6
    failed = {c.part for c in mix.verify() if not c.ok}
    assert failed == {"gemm"}


def test_on_a_cpu_each_part_is_timed_on_its_own(tiny: WorkloadOptions) -> None:
    # Rates from one shared step time would move together by construction (issue 19: three
    # identical ratios); each part's own block of the step is its time.
    mix = on_cpu(MixWorkload, tiny)
    result = mix.step()
    spans = [(p.t_start, p.t_end) for p in result.parts]
    assert all(a is not None and b is not None and a < b for a, b in spans)
    assert result.t_start <= spans[0][0] and spans[-1][1] <= result.t_end
    assert all(spans[i][1] <= spans[i + 1][0] for i in range(len(spans) - 1))  # in turn
    assert "own time" in mix.describe()["rates"]

    batch = _SampleBatch(_Channel(None, 0.0))  # type: ignore[arg-type]
    batch.add(result, [])
    stored = {row[2]: (row[0], row[1]) for row in batch._rows}
    assert stored == {p.part: (p.t_start, p.t_end) for p in result.parts}


def test_lock_step_mix_ends_each_step_as_a_ddp_step(tiny: WorkloadOptions, monkeypatch) -> None:
    # One gloo rank in this process: the training part is the ddp step, the step carries
    # its sync timing, and the counts every rank must share are the ones the step ran.
    env = {"SOAK_DDP_RANK": "0", "SOAK_DDP_WORLD": "1", "SOAK_DDP_ADDR": "127.0.0.1"}
    for key, value in {**env, "SOAK_DDP_PORT": str(free_port())}.items():
        monkeypatch.setenv(key, value)
    mix = on_cpu(MixWorkload, tiny, mix_sync=True)
    try:
        result = mix.step()
        assert mix.ddp is not None and result.sync is not None
        sync = result.sync
        assert (sync.ranks, sync.iterations, sync.straggler) == (1, mix.repeats, 0)
        assert sync.allreduce_s is None  # one rank: nothing to all-reduce
        assert sync.compute_s + sync.wait_s == pytest.approx(sync.step_s)
        assert {p.part for p in result.parts} == {"gemm", "membw", "train"}
        described = mix.describe()
        assert described["lock_step"] is True
        assert described["parts"]["train"]["iterations_per_step"] == mix.repeats
    finally:
        mix.close()
    assert on_cpu(MixWorkload, tiny, mix_sync=False).ddp is None


def _row_verdicts(result, checks) -> dict[str, bool | None]:
    batch = _SampleBatch(_Channel(None, 0.0))  # type: ignore[arg-type]
    batch.add(result, checks)
    return {row[2]: row[5] for row in batch._rows}


def test_a_mix_reported_as_one_part_stores_every_parts_checks() -> None:
    # On a GPU the three parts overlap and are stored as one row, part "mix"; the checks
    # still name gemm, membw and train. Seen on an H200 (2026-12-04): matched by name alone,
    # no check reached a row and the report said "no results were verified".
    from workloads.base import PartWork, StepResult, Verification

    step = StepResult(0.0, 1.0, (PartWork("mix", 1e12, "FLOP"),))
    passed = [Verification(p, True, 10, 0) for p in ("gemm", "membw", "train")]
    assert _row_verdicts(step, passed) == {"mix": True}
    failed = [*passed[:2], Verification("train", False, 10, 3)]
    assert _row_verdicts(step, failed) == {"mix": False}
    assert _row_verdicts(step, []) == {"mix": None}


def test_a_check_of_no_reported_part_lands_in_one_row_only() -> None:
    # The lock-step mix on a CPU reports train, gemm and membw; its replica check is the
    # ddp part's, which no row names: it counts once, in the first part's row.
    from workloads.base import PartWork, StepResult, Verification

    parts = tuple(PartWork(p, 1.0, "u", 0.0, 1.0) for p in ("train", "gemm", "membw"))
    step = StepResult(0.0, 1.0, parts)
    checks = [Verification("ddp", False, 2, 1), Verification("gemm", True, 10, 0)]
    assert _row_verdicts(step, checks) == {"train": False, "gemm": True, "membw": None}
