"""One faulty simulated soak shared by the report tests (about 3 s to run and report)."""

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from soak.pipeline import build_outputs
from soak.runner import run
from soak.store import STORE_NAME
from tests.factories import sim_config

# What an operator, a vendor's inventory or a hostile tag could put into a report.
HOSTILE_NAME = "NVIDIA <script>alert(\"name\")</script> 'H100' & co"
HOSTILE_TAG = "<script>alert(1)</script>\"'><img src=x onerror=alert(2)>"
FAULTS = (
    "airflow:gpu=1:factor=2.2",
    "ecc:gpu=2:at=600",
    "hw-slowdown:gpu=3:at=1500:for=2",
)


def rename_device(run_dir: Path, index: int, name: str) -> None:
    """Rewrite a device's name in a store, as a vendor's odd inventory string would read."""
    conn = sqlite3.connect(run_dir / STORE_NAME)
    with conn:
        (text,) = conn.execute("SELECT info FROM devices WHERE idx=?", (index,)).fetchone()
        info = json.loads(text) | {"name": name}
        conn.execute("UPDATE devices SET info=? WHERE idx=?", (json.dumps(info), index))
    conn.close()


def set_meta(run_dir: Path, key: str, value: object) -> None:
    conn = sqlite3.connect(run_dir / STORE_NAME)
    with conn:
        conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, json.dumps(value)))
    conn.close()


def copy_run(run_dir: Path, to: Path) -> Path:
    """A fresh run folder holding only the store of ``run_dir``."""
    to.mkdir(parents=True)
    shutil.copy(run_dir / STORE_NAME, to / STORE_NAME)
    return to


@pytest.fixture(scope="session")
def faulty_run(tmp_path_factory) -> Path:
    """40 minutes of 4 simulated GPUs: GPU 1 starved of air, an ECC error on GPU 2, a
    2-second HW slowdown on GPU 3; a hostile tag and a hostile name on GPU 0."""
    out = tmp_path_factory.mktemp("faulty")
    config = sim_config(
        out,
        workload="mix",
        duration_s=2400.0,
        seed=3,
        sim_gpus=4,
        sim_faults=FAULTS,
        # Ideal sensors: these tests read a steady window apart from the final one on the
        # air-starved GPU 1, whose throttled clocks hunt with the real fans for the whole
        # 40 minutes (its equilibrium comes late, its steady window then is the final one).
        sim_sensors="ideal",
        tags={"rack": HOSTILE_TAG},
        command="soak run --backend sim --minutes 40 --sim-gpus 4 --seed 3",
    )
    # tick by tick, as a real run stores it: these tests edit the store's telemetry rows
    result = run(config, block_ticks=1)
    rename_device(result.run_dir, 0, HOSTILE_NAME)
    build_outputs(result.run_dir)
    return result.run_dir


@pytest.fixture(scope="session")
def fixed_run(tmp_path_factory) -> Path:
    """The same server and seed as ``faulty_run`` after its airflow was fixed."""
    out = tmp_path_factory.mktemp("fixed")
    config = sim_config(
        out, workload="mix", duration_s=2400.0, seed=3, sim_gpus=4, sim_faults=FAULTS[1:]
    )
    result = run(config)
    build_outputs(result.run_dir)
    return result.run_dir
