"""The pipeline: read a run, analyse it, write its outputs. The one place that does, for
``soak run`` (after the runner's loop), ``soak report`` and ``soak import``.

1. Read: the run folder's store, opened as a run dataset (``soak.dataset``) that reads one
   device at a time; a store cut short or damaged is salvaged (``soak.store.salvage``) and
   the dataset read from what is left, its meta saying so.
2. Judge by the profile asked for, else the one the run stored with itself (a later edit
   of its TOML file does not change an old run's verdict), else the default.
3. Analyse (``soak.analysis.analyze_run``: every device's series read once, one at a time).
4. Write ``summary.json``, ``junit.xml`` and ``report.html`` (``soak.report``: formatting
   only; the report's figures read each device's series once more, one at a time).

The outputs of an intact store are never replaced by what a damaged copy still holds.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

from soak.analysis.analyze import Analysis, analyze_run
from soak.analysis.decision import replay
from soak.dataset import RunData
from soak.model import Event, EventKind
from soak.profile import Profile, load_profile
from soak.record import StopDecision
from soak.report.html import REPORT_NAME, write_report
from soak.report.junit import JUNIT_NAME, write_junit
from soak.report.summary import SUMMARY_NAME, build_summary, write_summary
from soak.store import STORE_NAME, RunStore, StoreDamaged, is_sqlite_file, salvage, truncated


def judged_by(
    data: RunData, profile: Profile | None = None, design_inlet_c: float | None = None
) -> Profile:
    """The profile a run is judged by: ``profile``, else the one it stored with itself,
    else the default; ``design_inlet_c`` (°C) projects the headroom to another inlet."""
    if profile is None:
        recorded = data.meta.profile
        profile = Profile.from_dict(dict(recorded)) if recorded else load_profile(None)
    if design_inlet_c is not None:
        profile = profile.with_design_inlet(design_inlet_c)
    return profile


def analyze(store: RunStore, profile: Profile) -> Analysis:
    """The analysis of an open store by ``profile``, read one device at a time."""
    return analyze_run(RunData.open(store), profile)


@contextlib.contextmanager
def _intact(run_dir: Path) -> Iterator[RunStore | None]:
    """The run's store where it opens and is not cut short; None where it is damaged or
    cut (then salvaged); StoreDamaged where the file is no store at all."""
    path = run_dir / STORE_NAME if run_dir.is_dir() else run_dir
    try:
        store = RunStore.open(run_dir)
    except StoreDamaged:
        if not is_sqlite_file(path):  # not a store at all: nothing to salvage
            raise
        yield None
        return
    try:
        yield None if truncated(store.path) else store
    finally:
        store.close_read()


def _salvaged_run(run_dir: Path) -> RunStore:
    """What SQLite can still read of a damaged store, in a copy (its meta's ``salvage``
    says how much); StoreDamaged where the outputs built while it was intact stand."""
    path = run_dir / STORE_NAME if run_dir.is_dir() else run_dir
    store, _ = salvage(path)
    if _built_intact(run_dir / SUMMARY_NAME):
        store.close_read()
        raise StoreDamaged(
            f"{run_dir}: damaged run store; the outputs built from it while it was intact "
            "are kept (copy the store to another folder to report what is left of it)"
        )
    return store


def _built_intact(summary: Path) -> bool:
    """Whether ``summary`` was written from an intact store (a salvaged report says it was
    not): such outputs are never replaced by what a damaged copy still holds."""
    try:
        found = json.loads(summary.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(found, dict) and not (found.get("run") or {}).get("store_damage")


def build_outputs(
    run_dir: Path, profile: Profile | None = None, design_inlet_c: float | None = None
) -> tuple[Analysis, Path]:
    """Analyse a run folder's store and (re)write summary.json, junit.xml and report.html in
    it, from the store alone; the analysis and the path of report.html. The profile
    defaults to the one the run was started with (``judged_by``). A store found damaged
    while it is read is salvaged and analysed again from the start."""
    run_dir = Path(run_dir)
    with _intact(run_dir) as store:
        if store is not None:
            try:
                return _outputs(run_dir, RunData.open(store), profile, design_inlet_c)
            except StoreDamaged:
                pass  # a block that fails its checksum: what is left of it, below
    salvaged = _salvaged_run(run_dir)
    try:
        return _outputs(run_dir, RunData.open(salvaged), profile, design_inlet_c)
    finally:
        salvaged.close_read()


def _outputs(
    run_dir: Path, data: RunData, profile: Profile | None, design_inlet_c: float | None
) -> tuple[Analysis, Path]:
    """Analyse ``data`` and write the three outputs into ``run_dir``."""
    analysis = analyze_run(data, judged_by(data, profile, design_inlet_c))
    write_summary(run_dir / SUMMARY_NAME, build_summary(analysis))
    write_junit(run_dir / JUNIT_NAME, analysis)
    report = run_dir / REPORT_NAME
    write_report(report, analysis, data)
    return analysis, report


def replay_stop(run_dir: Path) -> str:
    """Replay the sequential stop of ``--until-steady`` on an imported run's store, keep it
    there (an event and the meta ``stop_decision``, which summary.json and the report
    carry) and return its line. The replay cuts the whole run at many times: the store is
    read whole (an imported trace's length)."""
    store = RunStore.open(run_dir)
    try:
        data = RunData.from_store(store)
        profile = judged_by(data)
        found = replay(data, profile, analyze_run(data, profile))
        if found is None:
            line = "sequential stop (replayed): no stop before the end of the load segment"
            stored = StopDecision(reason=line, decided=False, replayed=True)
        else:
            line = f"sequential stop (replayed) at {found.t_s:,.0f} s: {found.reason()}"
            stored = dataclasses.replace(found.record(), replayed=True)
        t_event = data.meta.stop.load_stop_s if found is None and data.meta.stop else None
        at = found.t_s if found is not None else (t_event or 0.0)
        store.append(events=[Event(at, EventKind.STOP, line)])
        store.set_stop_decision(stored)
    finally:
        store.close()
    return line
