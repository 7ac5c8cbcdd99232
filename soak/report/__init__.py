"""What a run leaves for people and tools: summary.json, junit.xml and report.html."""

from __future__ import annotations

import json
from pathlib import Path

from soak.analysis import Analysis, RunData, analyze_run
from soak.profile import Profile, load_profile
from soak.report.html import write_report
from soak.report.junit import write_junit
from soak.report.summary import build_summary, write_summary
from soak.store import (
    STORE_NAME,
    RunStore,
    StoreDamaged,
    is_sqlite_file,
    salvage,
    truncated,
)

REPORT_NAME = "report.html"
SUMMARY_NAME = "summary.json"
JUNIT_NAME = "junit.xml"


def read_run(run_dir: Path) -> RunData:
    """A run's records from its store; from what SQLite can still read of it where the store
    is damaged (cut short, pages overwritten), its meta's ``salvage`` saying how much."""
    path = run_dir / STORE_NAME if run_dir.is_dir() else run_dir
    try:
        store = RunStore.open(run_dir)
    except StoreDamaged:
        if not is_sqlite_file(path):  # not a store at all: nothing to salvage
            raise
        store = None
    data = None
    if store is not None:
        try:
            data = None if truncated(store.path) else RunData.from_store(store)
        except StoreDamaged:
            data = None
        finally:
            store.close_read()
    if data is not None:
        return data
    salvaged, _ = salvage(path)
    try:
        return RunData.from_store(salvaged)
    finally:
        salvaged.close_read()


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
    it, from the store alone. The profile defaults to the one the run was started with;
    ``design_inlet_c`` (°C) projects the headroom to another inlet than the profile's.
    The store is read once: the analysis and the report share its series."""
    run_dir = Path(run_dir)
    data = read_run(run_dir)
    if data.meta.salvage is not None and _built_intact(run_dir / SUMMARY_NAME):
        raise StoreDamaged(
            f"{run_dir}: damaged run store; the outputs built from it while it was intact "
            "are kept (copy the store to another folder to report what is left of it)"
        )
    if profile is None:
        recorded = data.meta.profile
        # The profile stored with the run: a later edit of its TOML file does not
        # change an old run's verdict.
        profile = Profile.from_dict(recorded) if recorded else load_profile(None)
    if design_inlet_c is not None:
        profile = profile.with_design_inlet(design_inlet_c)
    analysis = analyze_run(data, profile)
    write_summary(run_dir / SUMMARY_NAME, build_summary(analysis))
    write_junit(run_dir / JUNIT_NAME, analysis)
    report = run_dir / REPORT_NAME
    write_report(report, analysis, data)
    return analysis, report
