import pytest

from soak.config import RunConfig


@pytest.fixture
def sim_config(tmp_path):
    """A RunConfig for the simulated server writing under tmp_path."""

    def make(**overrides):
        values = {
            "backend": "sim",
            "workload": "gemm",
            "duration_s": 1800.0,
            "seed": 1,
            "out": tmp_path / "reports",
            "baseline_s": 10.0,
        }
        values.update(overrides)
        return RunConfig(**values)

    return make
