import pytest

from tests import factories
from tests.workloads.sizes import TINY_TRAIN
from workloads import WorkloadOptions


@pytest.fixture
def sim_config(tmp_path):
    """A RunConfig for the simulated server writing under tmp_path."""

    def make(**overrides):
        return factories.sim_config(tmp_path / "reports", **overrides)

    return make


@pytest.fixture
def tiny() -> WorkloadOptions:
    """Small sizes, short steps, one CPU thread: each step in tens of milliseconds."""
    return WorkloadOptions(
        step_s=0.05,
        gemm_n=64,
        gemm_ring=4,
        membw_bytes=1 << 20,
        train_loader_workers=0,
        cpu_threads=1,
        **TINY_TRAIN,
    )
