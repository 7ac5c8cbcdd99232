"""WorkloadOptions: bad values fail at once, naming the field the operator set."""

from __future__ import annotations

import pytest

from workloads import WORKLOADS, WorkloadOptions


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"dtype": "int4"}, "dtype"),
        ({"mem_fraction": 0.0}, "mem_fraction"),
        ({"mem_fraction": 1.5}, "mem_fraction"),
        ({"step_s": -1.0}, "step_s"),
        ({"verify_interval_s": float("nan")}, "verify_interval_s"),
        ({"gemm_n": 8}, "gemm_n"),
        ({"train_layers": 0}, "train_layers"),
        ({"train_loader_workers": -1}, "train_loader_workers"),
    ],
)
def test_bad_option_names_its_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError, match=f"^{field}:"):
        WorkloadOptions(**kwargs)  # type: ignore[arg-type]


def test_defaults_are_valid_and_every_workload_is_registered() -> None:
    options = WorkloadOptions()
    assert options.dtype is None
    assert set(WORKLOADS) == {"gemm", "membw", "train", "mix", "ddp"}
    assert all(WORKLOADS[name](options).name == name for name in WORKLOADS)
