"""GEMM: positive FLOP per step, results checked, corruption caught with its size."""

from __future__ import annotations

import functools

import pytest
import torch

from tests.workloads.sizes import on_cpu
from workloads import WorkloadOptions
from workloads.device import cpu_flags, cpu_gemm_dtype
from workloads.gemm import GemmWorkload

make = functools.partial(on_cpu, GemmWorkload)


def test_step_reports_flop_of_the_products_it_ran(tiny: WorkloadOptions) -> None:
    gemm = make(tiny)
    result = gemm.step()
    (part,) = result.parts
    assert (part.part, part.unit) == ("gemm", "FLOP")
    assert result.t_end > result.t_start
    assert part.work > 0 and part.work % (2 * 64**3) == 0
    assert gemm.describe()["dtype"] == cpu_gemm_dtype(cpu_flags()).name  # bf16 with AMX


@pytest.mark.parametrize("dtype", ["fp32", "fp64", "bf16", "fp16", "fp8"])
def test_clean_results_pass_at_every_dtype(tiny: WorkloadOptions, dtype: str) -> None:
    gemm = make(tiny, dtype=dtype, gemm_n=128)
    gemm.step()
    (check,) = gemm.verify()
    assert check.ok, check
    assert check.checked == 128 * 128
    assert check.max_rel_error is not None and check.max_rel_error < 0.05


def test_corrupted_element_is_a_failed_verification_with_its_size(
    tiny: WorkloadOptions,
) -> None:
    gemm = make(tiny, dtype="fp32")
    gemm.step()
    assert gemm.last is not None
    out = gemm.outputs[gemm.last[2]]
    out[3, 5] += 1000.0
    (check,) = gemm.verify()
    assert not check.ok
    assert check.mismatched == 1
    assert check.max_abs_error == pytest.approx(1000.0, rel=1e-3)
    assert check.max_rel_error is not None and check.max_rel_error > 10


def test_nan_in_the_output_is_caught(tiny: WorkloadOptions) -> None:
    gemm = make(tiny, dtype="bf16")
    gemm.step()
    assert gemm.last is not None
    gemm.outputs[gemm.last[2]][0, :2] = float("nan")
    (check,) = gemm.verify()
    assert not check.ok
    assert check.mismatched == 2
    assert "2 non-finite" in check.detail


def test_a_flipped_low_bit_in_an_operand_is_caught(tiny: WorkloadOptions) -> None:
    gemm = make(tiny, dtype="fp32")
    gemm.step()
    assert gemm.last is not None
    i = gemm.last[0]
    gemm.ring[i].view(dtype=torch.int32)[5, 7] ^= 1  # the product moves far below tolerance
    checks = gemm.verify()
    assert [c.ok for c in checks] == [True, False]
    assert checks[1].mismatched == 1
    assert f"operand {i} " in checks[1].detail


def test_fixed_product_checksum_ignores_the_run_seed_and_catches_drift(
    tiny: WorkloadOptions,
) -> None:
    first, second = make(tiny, seed=1), make(tiny, seed=2)
    assert first.checksum() == second.checksum() is not None
    assert not torch.equal(first.ring[0], second.ring[0])
    first._fixed[0][0, 0] += 1.0  # the device now computes the fixed product differently
    checks = first.verify()
    assert [c.ok for c in checks] == [True, False]
    assert "checksum changed" in checks[1].detail


def test_a_gpus_ring_fills_the_memory_share_and_a_cpus_is_the_timed_pair(
    tiny: WorkloadOptions,
) -> None:
    gemm = make(tiny, dtype="fp32", gemm_ring=None, mem_bytes=64 * 64 * 4 * 40)
    assert 20 <= gemm._ring_size() <= 40  # what a GPU holds; a CPU's matrix unit wants cache
    assert len(gemm.ring) == 2
    assert len(make(tiny, gemm_ring=6).ring) == 6


def test_tf32_needs_a_gpu(tiny: WorkloadOptions) -> None:
    with pytest.raises(ValueError, match="tf32"):
        make(tiny, dtype="tf32")
