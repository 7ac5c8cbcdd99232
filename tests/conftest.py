import os

import pytest
from hypothesis import settings

from tests import factories
from tests.workloads.sizes import TINY_TRAIN
from workloads import WorkloadOptions

# Property tests search the same examples on every run of `make test`, so that the gate CI
# applies to a commit is the same whichever day it runs; `make fuzz` (SOAK_FUZZ=1) searches
# new ones, and what it finds becomes a test of its own.
settings.register_profile("gate", derandomize=True)
settings.register_profile("fuzz", derandomize=False, max_examples=2000)
settings.load_profile("fuzz" if os.environ.get("SOAK_FUZZ") else "gate")


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


# The fast tier (`make test-fast`, `-m "not slow"`) holds unit and property tests. What runs a
# simulated soak of more than a few minutes, real worker processes, a browser or a service is
# slow: whole modules that do only that, and any test that asks for a fixture that does.
SLOW_MODULES = frozenset(
    {
        "tests/scenarios/test_scenarios.py",
        "tests/scenarios/test_equilibrium_truth.py",
        "tests/test_runner.py",
        "tests/test_runner_nvml.py",
        "tests/test_worker.py",
        "tests/reliability/test_signals.py",
        "tests/reliability/test_device_lost.py",
        "tests/reliability/test_worker_faults.py",
        "tests/reliability/test_disk.py",
        "tests/reliability/test_memory.py",
        "tests/reliability/test_coordinator_kill.py",
        "tests/reliability/test_log_pipe.py",
        "tests/reliability/test_pipes.py",
        "tests/report/test_sparse_runs.py",
        "tests/report/test_browser.py",
    }
)
SLOW_FIXTURES = frozenset(
    {"faulty_run", "fixed_run", "finished_run", "sim_config", "stored_run", "small_run"}
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    root = config.rootpath
    for item in items:
        module = item.path.relative_to(root).as_posix()
        if module in SLOW_MODULES or SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


# `make test` runs two pytest workers (pytest-xdist, --dist loadscope), each group of tests on
# one worker, one test after another. A module is a group, so that its fixtures are made
# once; tests/report/ is one, so that its session runs (faulty_run, fixed_run) are made once;
# tests/reliability/ is one, so that the contention test's busy loops on every core never
# run beside another reliability test's deadline.
SHARED_GROUPS = ("tests/report/", "tests/reliability/")


def worker_group(nodeid: str) -> str:
    """The group a test runs in: its module, or the shared group its module is in."""
    module = nodeid.split("::", 1)[0]
    return next((group for group in SHARED_GROUPS if module.startswith(group)), module)


@pytest.hookimpl(tryfirst=True, optionalhook=True)  # a pytest-xdist hook: before its own
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """--dist loadscope with the groups of ``worker_group`` as its scopes."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ByGroup(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return worker_group(nodeid)

    return ByGroup(config, log)
