"""What a run leaves for people and tools: summary.json, junit.xml and report.html."""

from __future__ import annotations

from pathlib import Path

from soak.analysis import Analysis, analyze
from soak.config import Profile, load_profile
from soak.report.data import CachedStore
from soak.report.html import write_report
from soak.report.junit import write_junit
from soak.report.measures import measure
from soak.report.summary import build_summary, write_summary

REPORT_NAME = "report.html"
SUMMARY_NAME = "summary.json"
JUNIT_NAME = "junit.xml"


def build_outputs(run_dir: Path, profile: Profile | None = None) -> tuple[Analysis, Path]:
    """Analyse a run folder's store and (re)write summary.json, junit.xml and report.html in
    it, from the store alone. The profile defaults to the one the run was started with."""
    run_dir = Path(run_dir)
    store = CachedStore.open(run_dir)
    try:
        if profile is None:
            recorded = store.meta().get("profile")
            # The profile stored with the run: a later edit of its TOML file does not
            # change an old run's verdict.
            profile = Profile.from_dict(recorded) if recorded else load_profile(None)
        analysis = analyze(store, profile)
        measures = {
            d.index: measure(d, store.telemetry(d.index), store.work(d.index))
            for d in analysis.devices
        }
        summary = build_summary(analysis, measures)
        write_summary(run_dir / SUMMARY_NAME, summary)
        write_junit(run_dir / JUNIT_NAME, analysis)
        report = run_dir / REPORT_NAME
        write_report(report, analysis, store, measures)
    finally:
        store.close_read()
    return analysis, report
