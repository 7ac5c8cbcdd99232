"""``junit.xml``: every acceptance check of a run as a JUnit test case, so that CI systems and
fleet tools ingest a soak like any test run.

One ``<testsuite>`` per device and one for the server, one ``<testcase>`` per check result.
A failing check is a ``<failure>``. JUnit has no "warning": a warning check is ``<skipped>``,
which every CI shows as wanting attention without failing the job, as a warning does not
fail the verdict; a check that could not run for want of a signal (``not_checked``) is
``<skipped>`` too, its message saying so; a check left incomplete because something else
used the device is an ``<error>`` of type "incomplete". Every case carries its message (with its
numbers) in ``<system-out>``, a run that did not complete is an ``<error>`` in the server
suite. Case names are stable from
run to run (the check, and the window and workload part it is about where a device has
several), so a CI's history follows each check. Nothing depends on when the report was
built: rebuilding a run's report gives the same file.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

from soak.analysis.analyze import COMPLETE_STOPS, Analysis
from soak.analysis.checks import Finding, Status
from soak.record import RunRecord

JUNIT_NAME = "junit.xml"
_BAD_XML = re.compile("[^\u0009\u000a\u000d\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _text(value: object) -> str:
    """Text XML 1.0 can hold: control characters a device string might carry are dropped."""
    return _BAD_XML.sub("", str(value))


def case_names(checks: list[Finding]) -> list[str]:
    """A stable name per check result: the check's name, qualified by the window and the
    workload part it is about where the same check appears more than once."""
    count = Counter(c.check for c in checks)
    names = []
    for c in checks:
        if count[c.check] == 1:
            names.append(str(c.check))
            continue
        qualifier = ", ".join(q for q in (c.window, c.part) if q)
        names.append(f"{c.check} ({qualifier})" if qualifier else str(c.check))
    seen: Counter[str] = Counter(names)
    numbered: Counter[str] = Counter()
    out = []
    for name in names:  # still ambiguous: number them in order
        if seen[name] > 1:
            numbered[name] += 1
            name = f"{name} #{numbered[name]}"
        out.append(name)
    return out


def _case(suite: ET.Element, classname: str, name: str, status: Status | str, message: str):
    case = ET.SubElement(suite, "testcase", classname=_text(classname), name=_text(name))
    case.set("time", "0")
    if status == Status.FAIL:
        ET.SubElement(case, "failure", message=_text(message), type="fail").text = _text(message)
    elif status == Status.WARN:
        ET.SubElement(case, "skipped", message=_text(f"warning: {message}"))
    elif status == Status.NOT_CHECKED:
        text = f"not checked, signal not available: {message}"
        ET.SubElement(case, "skipped", message=_text(text))
    elif status == Status.INCOMPLETE:  # not judged: something else used the device
        text = f"incomplete: {message}"
        ET.SubElement(case, "error", message=_text(text), type="incomplete").text = _text(text)
    elif status == "error":
        ET.SubElement(case, "error", message=_text(message), type="incomplete").text = _text(
            message
        )
    label = "NOT CHECKED" if status == Status.NOT_CHECKED else str(status).upper()
    ET.SubElement(case, "system-out").text = _text(f"{label}: {message}")
    return case


def _suite(parent: ET.Element, name: str, run: RunRecord, duration: float | None) -> ET.Element:
    suite = ET.SubElement(parent, "testsuite", name=_text(name))
    if run.started_utc:
        suite.set("timestamp", run.started_utc.removesuffix("Z"))
    suite.set("hostname", _text(run.host or "unknown"))
    if duration is not None:  # unrecorded: no time at all, never 0 (the attribute is optional)
        suite.set("time", f"{duration:.3f}")
    return suite


def _properties(suite: ET.Element, values: dict[str, object]) -> None:
    props = ET.SubElement(suite, "properties")
    for key, value in values.items():
        if value is not None:
            ET.SubElement(props, "property", name=key, value=_text(value))


def _count(suite: ET.Element) -> None:
    cases = suite.findall("testcase")
    suite.set("tests", str(len(cases)))
    for tag, attr in (("failure", "failures"), ("error", "errors"), ("skipped", "skipped")):
        suite.set(attr, str(sum(1 for c in cases if c.find(tag) is not None)))


def run_cases(analysis: Analysis) -> list[tuple[str, Status | str, str]]:
    """The run's own test cases beside the analysis's checks (the devices found, the run
    completed), so that the report counts what ``junit.xml`` counts. The synchronous loss is
    a figure, not a check: a property of the server's suite."""
    cases: list[tuple[str, Status | str, str]] = []
    if not analysis.devices:
        cases.append(("devices", Status.FAIL, "no devices were found or loaded"))
    if analysis.stop_reason not in COMPLETE_STOPS:
        stop = analysis.stop
        detail = (stop.detail if stop is not None else None) or ""
        message = f"the run did not complete (stop: {analysis.stop_reason}" + (
            f": {detail})" if detail else ")"
        )
        cases.append(("run_complete", "error", message))
    else:
        cases.append(("run_complete", Status.PASS, f"stop: {analysis.stop_reason}"))
    return cases


def build_junit(analysis: Analysis) -> ET.ElementTree:
    run, stop = analysis.run, analysis.stop
    duration = None if stop is None else stop.duration_s
    host = run.host or "unknown"
    host_id = re.sub(r"[^\w-]", "_", str(host))
    root = ET.Element("testsuites", name=_text(f"soak {host}"))
    for d in analysis.devices:
        suite = _suite(root, f"{host} {d.info.label}: {d.info.name}", run, duration)
        _properties(
            suite,
            {
                "verdict": d.verdict,
                "diagnosis": d.diagnosis,
                "name": d.info.name,
                "uuid": d.info.uuid,
                "serial": d.info.serial,
                "pci_bus_id": d.info.pci_bus_id,
            },
        )
        classname = f"soak.{host_id}.gpu{d.index}"
        for check, name in zip(d.checks, case_names(d.checks), strict=True):
            _case(suite, classname, name, check.status, check.message)
        _count(suite)

    suite = _suite(root, f"{host} server", run, duration)
    _properties(
        suite,
        {
            "verdict": analysis.verdict,
            "stop_reason": analysis.stop_reason,
            "command": run.command,
            "seed": run.seed,
            "sync_loss": analysis.sync_loss.loss,
            "slowest_device": analysis.sync_loss.slowest,
        },
    )
    classname = f"soak.{host_id}.server"
    server = analysis.server_checks
    for check, name in zip(server, case_names(server), strict=True):
        _case(suite, classname, name, check.status, check.message)
    for name, status, message in run_cases(analysis):
        _case(suite, classname, name, status, message)
    _count(suite)

    for attr in ("tests", "failures", "errors", "skipped"):
        root.set(attr, str(sum(int(s.get(attr, "0")) for s in root.findall("testsuite"))))
    if duration is not None:
        root.set("time", f"{duration:.3f}")
    ET.indent(root)
    return ET.ElementTree(root)


def write_junit(path: Path, analysis: Analysis) -> None:
    tmp = path.with_suffix(".xml.tmp")
    build_junit(analysis).write(tmp, encoding="utf-8", xml_declaration=True)
    tmp.replace(path)
