"""membw: bytes read plus written, data checked exactly."""

from __future__ import annotations

import functools

import pytest
import torch

import workloads.membw
from tests.workloads.sizes import on_cpu
from workloads import WorkloadOptions
from workloads.membw import MembwWorkload

make = functools.partial(on_cpu, MembwWorkload)


def test_step_reports_ten_array_lengths_per_cycle(tiny: WorkloadOptions) -> None:
    membw = make(tiny)
    result = membw.step()
    (part,) = result.parts
    assert (part.part, part.unit) == ("membw", "B")
    assert part.work > 0 and part.work % (10 * (1 << 20)) == 0
    assert result.t_end > result.t_start
    assert membw.describe()["chunk_b"] == 1 << 20  # a CPU runs the whole array as one chunk


def test_data_survive_the_cycles_unchanged(tiny: WorkloadOptions) -> None:
    membw = make(tiny)
    for _ in range(3):
        membw.step()
    (check,) = membw.verify()
    assert check.ok, check
    assert check.checked == 3 * (1 << 18)


def test_one_flipped_bit_is_caught(tiny: WorkloadOptions) -> None:
    membw = make(tiny)
    membw.step()
    bits = membw.b[0].view(dtype=torch.int32)
    bits[1234] ^= 1 << 3  # a low mantissa bit of one element of B
    (check,) = membw.verify()
    assert not check.ok
    assert check.mismatched == 1
    assert check.max_abs_error is not None and 0 < check.max_abs_error < 1


def test_corruption_in_a_cycle_reaches_the_check(tiny: WorkloadOptions) -> None:
    membw = make(tiny)
    membw.a[0][10:20] += 7.0
    membw.step()  # the error propagates through copy and triad into A and C
    (check,) = membw.verify()
    assert not check.ok
    assert check.mismatched == 20
    assert check.max_abs_error == 7.0


def test_a_flipped_sign_bit_on_a_zero_is_caught(
    tiny: WorkloadOptions, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(workloads.membw, "PATTERN_BOUND", 1)  # patterns of -1 and 0
    membw = make(tiny)
    bits = membw.b[0].view(dtype=torch.int32)
    zero = int(torch.nonzero(membw.b[0] == 0)[0])
    bits[zero] ^= -(1 << 31)  # the sign bit: +0.0 becomes -0.0, equal as a float
    (check,) = membw.verify()
    assert not check.ok
    assert check.mismatched == 1
