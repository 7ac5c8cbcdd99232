"""The workload options type their own command-line text (``--option KEY=VALUE``)."""

import pytest

from workloads.base import OptionError, WorkloadOptions


def test_each_value_takes_its_fields_type() -> None:
    typed = WorkloadOptions.typed(
        [("gemm_n", "4096"), ("mem_bytes", "4e9"), ("mem_fraction", "0.25"), ("dtype", "bf16")]
    )
    assert typed == {"gemm_n": 4096, "mem_bytes": 4_000_000_000, "mem_fraction": 0.25,
                     "dtype": "bf16"}  # fmt: skip
    assert type(typed["gemm_n"]) is int and type(typed["mem_fraction"]) is float


@pytest.mark.parametrize(
    ("pairs", "message"),
    [
        ([("gemm", "1")], "gemm: unknown (known: "),
        ([("gemm_n", "1.5")], "gemm_n: '1.5' is not a whole number"),
        ([("step_s", "fast")], "step_s: 'fast' is not a number"),
        ([("mem_fraction", "2")], "mem_fraction: 2.0 is not in (0, 0.95]"),
    ],
)
def test_a_bad_value_names_its_key(pairs, message) -> None:
    with pytest.raises(OptionError) as err:
        WorkloadOptions.typed(pairs)
    assert str(err.value).startswith(message)
