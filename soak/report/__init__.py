"""What a run leaves for people and tools: summary.json, report.html (and later junit.xml)."""

from __future__ import annotations

from pathlib import Path

from soak.analysis import Analysis, analyze
from soak.config import Profile, load_profile
from soak.report.html import write_report
from soak.report.summary import build_summary, write_summary
from soak.store import RunStore

REPORT_NAME = "report.html"
SUMMARY_NAME = "summary.json"


def build_outputs(run_dir: Path, profile: Profile | None = None) -> tuple[Analysis, Path]:
    """Analyse a run folder's store and (re)write summary.json and report.html in it.
    The profile defaults to the one the run was started with."""
    store = RunStore.open(run_dir)
    try:
        if profile is None:
            recorded = store.meta().get("profile", {})
            profile = _profile_from_meta(recorded)
        analysis = analyze(store, profile)
        summary = build_summary(analysis)
        write_summary(run_dir / SUMMARY_NAME, summary)
        report = run_dir / REPORT_NAME
        write_report(report, analysis, summary, store)
    finally:
        store.close_read()
    return analysis, report


def _profile_from_meta(recorded: dict) -> Profile:
    """Rebuild the run's profile from the copy stored with it (so a later edit of the TOML
    file does not change an old run's verdict)."""
    from soak.config import Checks, Windows

    if not recorded:
        return load_profile(None)
    known_w = set(Windows.__dataclass_fields__)
    known_c = set(Checks.__dataclass_fields__)
    return Profile(
        name=recorded.get("name", "default"),
        source=recorded.get("source", "stored"),
        windows=Windows(**{k: v for k, v in recorded.get("windows", {}).items() if k in known_w}),
        checks=Checks(**{k: v for k, v in recorded.get("checks", {}).items() if k in known_c}),
        floors=dict(recorded.get("floors", {})),
        floor_sources=dict(recorded.get("floor_sources", {})),
    )
