"""The run and stop records (soak/record.py): every layout a soak has written reads back typed,
with None for what was not recorded; the current layout is written byte for byte as before;
keys this soak does not know survive a read and a write; a wrong type is a damaged store."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from soak.cli import main
from soak.errors import StoreError
from soak.model import StopReason
from soak.pipeline import analyze
from soak.profile import load_profile
from soak.record import RunMeta, RunRecord, SimRecord, StopDecision, StopRecord
from soak.report.junit import build_junit
from soak.report.summary import build_summary
from soak.store import STORE_NAME, RunStore
from tests.test_golden import visible_text

OLD_STORE = Path(__file__).parent / "fixtures" / "old-store" / "v1-sim" / STORE_NAME

# Each layout of meta "run" as the writer of its time wrote it (git log -S on the keys).
V1_LIVE = {  # 7a795fe/efbe6fb: the first runner
    "backend": "nvml",
    "command": "soak run --backend nvml --workload gemm --minutes 0.6",
    "duration_asked_s": 36.0,
    "host": "vm",
    "interval_s": 1.0,
    "seed": 1,
    "sim": None,
    "started_utc": "2026-11-30T01:43:37Z",
    "tags": {},
    "until_steady": False,
    "workload": "gemm",
    "workload_options": {},
}
V1_SIM = V1_LIVE | {"backend": "sim", "sim": {"faults": ["ecc:gpu=1"], "gpus": 2, "sku": "h100"}}
# 6ebbd6e: the first importer, before records_throughput (068595d)
IMPORT_V1 = V1_LIVE | {
    "backend": "import",
    "seed": None,
    "duration_asked_s": None,
    "t0_monotonic_s": None,
    "source": {"file": "x.csv", "format": "csv", "load_segment": {"start_s": 0.0}},
}
# today's writers: a4e1b13 added t0_monotonic_s, 4d4394f the simulator's sensors
CURRENT_SIM = V1_SIM | {
    "t0_monotonic_s": None,
    "sim": {"faults": [], "gpus": 2, "sensors": "real", "sku": "h100-sxm"},
    "workload_options": {"dtype": "fp16"},
}
CURRENT_LIVE = V1_LIVE | {"t0_monotonic_s": 812.25, "tags": {"rack": "r7"}}
CURRENT_IMPORT = IMPORT_V1 | {"records_throughput": False}
STOP_V1 = {"detail": "", "duration_s": 61.0, "load_stop_s": 71.0, "reason": "duration"}


def _dumps(value: object) -> str:
    return json.dumps(value, sort_keys=True)  # as the store writes meta


def test_the_first_layout_reads_typed_with_none_for_what_it_did_not_record():
    run = RunRecord.from_json(V1_SIM)
    assert run.backend == "sim" and run.seed == 1 and run.duration_asked_s == 36.0
    assert run.until_steady is False and run.tags == {} and run.interval_s == 1.0
    assert run.sim == SimRecord(gpus=2, sku="h100", faults=("ecc:gpu=1",), sensors=None)
    # recorded later: unknown here, never 0 or False
    assert run.t0_monotonic_s is None and run.records_throughput is None and run.source is None
    assert run.extra == {} and not run.imported
    stop = StopRecord.from_json(STOP_V1)
    assert stop == StopRecord(StopReason.DURATION, 71.0, 61.0, "")
    assert stop.reason is StopReason.DURATION


def test_an_import_before_records_throughput_reads_as_not_saying():
    run = RunRecord.from_json(IMPORT_V1)
    assert run.imported and run.records_throughput is None and run.seed is None
    assert run.source == IMPORT_V1["source"]
    assert RunRecord.from_json(CURRENT_IMPORT).records_throughput is False


@pytest.mark.parametrize("layout", [CURRENT_SIM, CURRENT_LIVE, CURRENT_IMPORT])
def test_todays_layouts_are_written_back_byte_for_byte(layout):
    assert _dumps(RunRecord.from_json(layout).to_json()) == _dumps(layout)
    assert _dumps(StopRecord.from_json(STOP_V1).to_json()) == _dumps(STOP_V1)


def test_an_old_layout_is_written_in_todays_with_none_for_the_keys_it_lacked():
    written = RunRecord.from_json(V1_SIM).to_json()
    assert written["t0_monotonic_s"] is None and written["sim"]["sensors"] is None
    assert "records_throughput" not in written and "source" not in written  # a live run's
    assert RunRecord.from_json(written) == RunRecord.from_json(V1_SIM)


def test_keys_this_soak_does_not_know_survive_a_read_and_a_write():
    newer = CURRENT_SIM | {
        "node_group": {"nodes": ["a", "b"], "rank0": "a"},
        "sim": CURRENT_SIM["sim"] | {"racks": 2},
    }
    run = RunRecord.from_json(newer)
    assert run.extra == {"node_group": {"nodes": ["a", "b"], "rank0": "a"}}
    assert run.sim is not None and run.sim.extra == {"racks": 2}
    assert _dumps(run.to_json()) == _dumps(newer)
    stop = StopRecord.from_json(STOP_V1 | {"reason": "preempted", "by": "slurm"})
    assert stop.reason == "preempted" and not isinstance(stop.reason, StopReason)
    assert stop.to_json() == STOP_V1 | {"reason": "preempted", "by": "slurm"}


def test_a_missing_record_reads_as_nothing_recorded():
    assert RunMeta.from_json({}).run == RunRecord()
    assert RunRecord().tags == {} and RunRecord().backend is None
    # the coordinator died before it recorded a stop
    assert RunMeta.from_json({}).stop is None
    assert RunMeta.from_json({"stop": {}}).stop == StopRecord()


@pytest.mark.parametrize(
    ("record", "data", "named"),
    [
        (RunRecord, [1, 2], "run record is a list"),
        (RunRecord, V1_LIVE | {"duration_asked_s": "1h"}, "'duration_asked_s'"),
        (RunRecord, V1_LIVE | {"seed": 1.5}, "'seed'"),
        (RunRecord, V1_LIVE | {"seed": True}, "'seed'"),
        (RunRecord, V1_LIVE | {"until_steady": 1}, "'until_steady'"),
        (RunRecord, V1_LIVE | {"tags": ["rack"]}, "'tags'"),
        (RunRecord, V1_LIVE | {"sim": {"faults": [3]}}, "'faults'"),
        (StopRecord, STOP_V1 | {"duration_s": True}, "'duration_s'"),
        (StopRecord, STOP_V1 | {"reason": 3}, "'reason'"),
    ],
)
def test_a_value_of_the_wrong_type_is_an_error_naming_its_key(record, data, named):
    with pytest.raises(ValueError, match=named):
        record.from_json(data)


def _copy_old_store(folder: Path) -> Path:
    folder.mkdir()
    shutil.copy(OLD_STORE, folder / STORE_NAME)  # a reader may leave -wal/-shm beside it
    return folder


def test_a_wrong_type_in_a_stored_record_is_a_damaged_store(tmp_path):
    folder = _copy_old_store(tmp_path / "run")
    with contextlib.closing(sqlite3.connect(folder / STORE_NAME)) as conn:
        conn.execute("""UPDATE meta SET value='{"reason": 7}' WHERE key='stop'""")
        conn.commit()
    store = RunStore.open(folder)
    try:
        with pytest.raises(StoreError, match=r"damaged run store \(stop record 'reason' is 7"):
            store.meta()
    finally:
        store.close_read()


def test_a_store_written_by_the_first_release_reads_typed(tmp_path):
    """The fixture was written by commit efbe6fb (store version 1, the first run-record
    layout; tests/fixtures/old-store/README.md)."""
    store = RunStore.open(_copy_old_store(tmp_path / "run"))
    try:
        meta = store.meta()
    finally:
        store.close_read()
    assert meta.store_version == 1 and meta.salvage is None and meta.ddp_group is None
    run, stop = meta.run, meta.stop
    assert run.backend == "sim" and run.workload == "mix" and run.seed == 3
    assert run.tags == {"rack": "r7"} and run.duration_asked_s == 60.0
    assert run.sim == SimRecord(gpus=2, sku="h100-sxm", faults=("airflow:gpu=1:factor=2",))
    assert run.t0_monotonic_s is None and run.records_throughput is None and run.extra == {}
    assert stop == StopRecord(StopReason.DURATION, load_stop_s=71.0, duration_s=61.0, detail="")


def test_a_store_written_by_the_first_release_is_judged_as_before(tmp_path):
    """What the report made of this store before the records were typed: the verdict, the
    run block of summary.json and the run's own junit cases."""
    store = RunStore.open(_copy_old_store(tmp_path / "run"))
    try:
        analysis = analyze(store, load_profile(None))
    finally:
        store.close_read()
    summary = build_summary(analysis)
    # A minute of load was a PASS then; no device reached equilibrium in it, and under the
    # profile's min_load_s nothing is accepted now: it could not be judged
    assert summary["verdict"] == "INCOMPLETE"
    assert [d["verdict"] for d in summary["devices"]] == ["INCOMPLETE", "INCOMPLETE"]
    assert summary["run"] == {
        "backend": "sim",
        "workload": "mix",
        "started_utc": "2026-12-01T21:33:59Z",
        "duration_s": 61.0,
        "stop_reason": "duration",
        "seed": 3,
        "command": "soak run --backend sim --minutes 1 --sim-gpus 2 --seed 3 --tag rack=r7 "
        "--sim-fault airflow:gpu=1:factor=2 --out /tmp/oldrun",
        "host": "vm",
        "tags": {"rack": "r7"},
        "profile": "default",
        "store_damage": None,
        "ddp_group": None,
    }
    assert summary["host"]["soak"] == "0.1.0"  # the host record the old release wrote
    root = build_junit(analysis).getroot()
    server = root.findall("testsuite")[-1]
    assert server.get("hostname") == "vm" and server.get("timestamp") == "2026-12-01T21:33:59"
    assert server.get("time") == "61.000"
    (complete,) = [c for c in server.iter("testcase") if c.get("name") == "run_complete"]
    assert complete.find("error") is None and "stop: duration" in _text(complete)


def _text(case) -> str:
    """A junit case's text, its system-out included."""
    return " ".join(t for t in case.itertext() if t.strip())


@pytest.mark.slow  # draws the report's figures
def test_soak_report_on_a_store_of_the_first_release(tmp_path, capsys):
    folder = _copy_old_store(tmp_path / "run")
    assert main(["report", str(folder)]) == 3  # a minute of load: could not be judged
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1] == str(folder / "report.html")
    assert out[-2].startswith("verdict: INCOMPLETE (2 devices, stop: duration): could not be")
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["verdict"] == "INCOMPLETE" and summary["run"]["tags"] == {"rack": "r7"}
    text = visible_text((folder / "report.html").read_text())
    assert "simulated server\n2 × h100-sxm; faults:\nairflow:gpu=1:factor=2" in text
    assert "rack=r7" in text


def test_a_stop_reason_this_soak_does_not_know_never_gives_a_pass(tmp_path):
    """A newer soak may write a reason this one does not know; the run is then not known to
    have completed, so the store that passes on any length of load (min_load_s 0) is
    INCOMPLETE, not PASS."""
    folder = _copy_old_store(tmp_path / "run")
    profile = load_profile(None)
    any_length = dataclasses.replace(
        profile, checks=dataclasses.replace(profile.checks, min_load_s=0.0)
    )
    store = RunStore.open(folder)
    try:
        assert analyze(store, any_length).verdict == "PASS"
    finally:
        store.close_read()
    with contextlib.closing(sqlite3.connect(folder / STORE_NAME)) as conn:
        conn.execute("""UPDATE meta SET value='{"reason": "paused"}' WHERE key='stop'""")
        conn.commit()
    store = RunStore.open(folder)
    try:
        analysis = analyze(store, any_length)
    finally:
        store.close_read()
    assert analysis.stop_reason == "paused"
    assert analysis.verdict == "INCOMPLETE"
    assert build_summary(analysis)["verdict"] == "INCOMPLETE"


# The stop decision as the writers before the typed record wrote it (runner._keep_decision,
# pipeline.replay_stop at 0fe2ad1), each through the store's sorted JSON.
_JUDGED = {
    "device": 0,
    "check": "steady/cold gemm",
    "value": 0.998,
    "ci": 0.017,
    "floor": 0.95,
    "unit": None,
    "outcome": "pass",
}
_RATE = _JUDGED | {"check": "steady gemm", "value": 6.1e14, "ci": None, "floor": 5e14}
_RATE |= {"unit": "FLOP/s", "outcome": "undecided"}
DECISION_LIVE = {
    "reason": "all 2 checks decided at 95 % after 23.1 min of load: the closest, ...",
    "decided": True,
    "decided_at_s": 1446.0,
    "load_s": 1386.0,
    "confidence": 0.95,
    "n_checks": 2,
    "closest": _JUDGED,
    "undecided": [_RATE],
    "checks": [_JUDGED, _RATE],
    "predicted": [
        {"at_load_s": 300.0, "verdict_load_s": None},
        {"at_load_s": 600.0, "verdict_load_s": 1320.5},
    ],
    "actual_load_s": 1380.0,
}
DECISION_REPLAYED = {k: v for k, v in DECISION_LIVE.items() if k not in ("predicted",)}
del DECISION_REPLAYED["actual_load_s"]
DECISION_REPLAYED["replayed"] = True
DECISION_NONE = {
    "reason": "sequential stop (replayed): no stop before the end of the load segment",
    "decided": False,
    "decided_at_s": None,
    "replayed": True,
}


@pytest.mark.parametrize("layout", [DECISION_LIVE, DECISION_REPLAYED, DECISION_NONE])
def test_a_stored_stop_decision_reads_typed_and_writes_back_byte_for_byte(layout):
    stored = json.dumps(layout, sort_keys=True)
    meta = RunMeta.from_json({"stop_decision": json.loads(stored)})
    found = meta.stop_decision
    assert isinstance(found, StopDecision) and "stop_decision" not in meta.extra
    assert found.reason == layout["reason"] and found.decided is layout["decided"]
    assert json.dumps(found.to_json()) == stored  # summary.json keeps the stored order
    if "checks" in layout:
        assert found.checks is not None and found.checks[1].ci is None
        assert found.checks[1].unit == "FLOP/s" and found.closest == found.checks[0]
    else:
        assert found.checks is None and found.predicted is None
    assert (found.predicted is not None) == ("predicted" in layout)
    assert found.replayed is layout.get("replayed")


def test_a_stop_decisions_unknown_keys_survive_and_wrong_types_are_damage():
    layout = DECISION_LIVE | {"new_fact": 1, "checks": [_JUDGED | {"new_too": "x"}]}
    found = StopDecision.from_json(json.loads(json.dumps(layout)))
    assert found.extra == {"new_fact": 1} and found.checks[0].extra == {"new_too": "x"}
    assert found.to_json() == json.loads(json.dumps(layout, sort_keys=True))
    with pytest.raises(ValueError, match="'decided'"):
        StopDecision.from_json(DECISION_NONE | {"decided": "yes"})
    with pytest.raises(ValueError, match="check 'value'"):
        StopDecision.from_json(DECISION_LIVE | {"checks": [_JUDGED | {"value": "high"}]})


def test_a_decision_is_stored_by_the_store_and_read_back_typed(tmp_path):
    store = RunStore.create(tmp_path / STORE_NAME)
    try:
        store.set_stop_decision(StopDecision.from_json(DECISION_LIVE))
        assert store.meta().stop_decision == StopDecision.from_json(DECISION_LIVE)
    finally:
        store.close()
