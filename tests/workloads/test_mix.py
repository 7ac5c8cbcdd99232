"""mix: three parts reported separately; each part's checks still bite."""

from __future__ import annotations

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
