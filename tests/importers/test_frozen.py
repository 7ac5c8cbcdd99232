"""A frozen span in an imported log is never judged: the judged load ends where it starts."""

import datetime as dt
import gzip

import pytest

from soak.analysis.analyze import analyze_run
from soak.analysis.checks import Status
from soak.dataset import RunData
from soak.importers import core
from soak.importers import csv as csv_import
from soak.importers.core import FROZEN_BASIS, ImportOptions, write_run
from soak.importers.source import ImportFailed, describe
from soak.model import EventKind, Verdict
from soak.profile import load_profile
from soak.store import RunStore
from testkit.traces import h100_csv_options
from tests.importers.conftest import FIXTURES

H100_OPTIONS = h100_csv_options()
FROZEN_MIN = 40


def h100_log_that_freezes(tmp_path, head_s: float = 130.0):
    """The real H100 trace's first ``head_s`` (idle, then nanoGPT training from about 29 s),
    then every GPU's last row repeated once a second for 40 minutes: the logger hung."""
    with gzip.open(FIXTURES / "h100-f4f827dd-from-idle-head.csv.gz", "rt") as f:
        header, *rows = f.read().splitlines()
    first = dt.datetime.fromisoformat(rows[0].split(",")[0])
    kept = [
        r
        for r in rows
        if (dt.datetime.fromisoformat(r.split(",")[0]) - first).total_seconds() <= head_s
    ]
    last = {r.split(",")[1]: r.split(",")[2:] for r in kept}
    end = dt.datetime.fromisoformat(kept[-1].split(",")[0])
    tail = []
    for k in range(1, FROZEN_MIN * 60 + 1):
        stamp = (end + dt.timedelta(seconds=k)).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        tail += [",".join([stamp, gpu, *values]) for gpu, values in last.items()]
    path = tmp_path / "frozen.csv"
    path.write_text("\n".join([header, *kept, *tail]) + "\n")
    return path, (end - first).total_seconds()


def imported(path, out):
    trace = csv_import.read(path, H100_OPTIONS)
    options = ImportOptions(workload="train", host="h100", out=out, tags={}, command="test")
    result = write_run(trace, describe(path, "csv"), options)
    store = RunStore.open(result.run_dir)
    try:
        data = RunData.from_store(store)
    finally:
        store.close_read()
    return result, analyze_run(data, load_profile(None))


@pytest.mark.slow
def test_a_frozen_span_cut_from_a_real_trace_is_never_judged(tmp_path):
    path, frozen_from = h100_log_that_freezes(tmp_path)
    result, analysis = imported(path, tmp_path / "out")
    assert analysis.verdict is Verdict.INCOMPLETE
    assert {d.verdict for d in analysis.devices} == {Verdict.INCOMPLETE}
    assert result.segment.end_s == pytest.approx(frozen_from, abs=1.0)
    frozen = [s for s in result.others if s.basis == FROZEN_BASIS]
    assert len(frozen) == 1 and frozen[0].length_s == pytest.approx(FROZEN_MIN * 60, abs=2)
    (event,) = [e for e in analysis.events if e.kind is EventKind.TELEMETRY]
    since = (event.t_s - analysis.devices[0].load_start_s) / 60  # the device's load start's
    assert event.message.startswith(f"telemetry frozen from {since:.1f} min: power ")
    assert "unchanged for 40 min while the load ran; the judged load ends where" in event.message
    warned = [c for c in analysis.checks if c.check == "telemetry"]
    assert [c.status for c in warned] == [Status.WARN]


@pytest.mark.slow
def test_the_same_log_passes_when_the_freeze_goes_unseen(tmp_path, monkeypatch):
    """What the cut prevents: judged as it stands, the frozen hour is a perfect steady state."""
    path, _ = h100_log_that_freezes(tmp_path)
    monkeypatch.setattr(core, "first_freeze", lambda trace, segment: None)
    _, analysis = imported(path, tmp_path / "out")
    assert analysis.verdict is Verdict.PASS


@pytest.mark.slow
def test_a_log_frozen_from_the_loads_start_has_nothing_to_judge(tmp_path):
    path, _ = h100_log_that_freezes(tmp_path, head_s=40.0)
    with pytest.raises(ImportFailed, match=r"from the load's start .*: no load before it to judge"):
        imported(path, tmp_path / "out")


@pytest.mark.slow
def test_soak_import_says_where_the_judged_load_ends(tmp_path, capsys):
    """The command line: the frozen span listed as a segment, a warning, INCOMPLETE."""
    from soak.cli import main

    path, frozen_from = h100_log_that_freezes(tmp_path)
    args = ["import", "csv", str(path), "--time-col", "timestamp", "--time-unit", "iso"]
    args += ["--device-col", "gpu_index", "--map", "temp_c=temperature_C"]
    args += ["--map", "util_pct=utilization_gpu_percent", "--map", "power_w=power_W"]
    code = main([*args, "--out", str(tmp_path / "out")])
    out, err = capsys.readouterr()
    assert code == 3  # INCOMPLETE
    assert f"other segment: {frozen_from:.1f} s to " in out
    assert "(frozen telemetry (not judged))" in out
    assert "warning: device 0: telemetry frozen from " in err and " min: power " in err
    assert "the judged load ends where the freeze starts" in err
    assert "verdict: INCOMPLETE" in out
