"""Figures that reconcile: what the live log printed is in the report's event log at the same
minute of load, and every time is in minutes of load (issue 43)."""

from __future__ import annotations

import datetime as dt
import html as htmllib
import io
import re

from soak.live.view import PlainView, Tracker
from soak.pipeline import build_outputs
from soak.runner import run


def _event_rows(report: str) -> list[tuple[str, str, str, str]]:
    """The event log's rows: (time, where, kind, message), as the reader sees them."""
    section = report.split('<h2 id="events">')[1].split("<h2 ")[0]
    rows = re.findall(
        r'<tr[^>]*><td class="num">([^<]*)</td><td>([^<]*)</td><td>([^<]*)</td><td>([^<]*)</td>',
        section,
    )
    return [tuple(htmllib.unescape(cell) for cell in row) for row in rows]  # type: ignore[misc]


def test_every_message_the_live_log_printed_is_in_the_event_log_at_its_minute(sim_config):
    stream = io.StringIO()
    noon = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)
    config = sim_config(
        workload="mix",
        duration_s=600.0,
        seed=7,
        sim_gpus=3,
        sim_faults=("airflow:gpu=1:factor=2.2",),
    )
    result = run(config, watchers=[PlainView(stream, Tracker(), now=lambda: noon)])
    _, report = build_outputs(result.run_dir)
    rows = _event_rows(report.read_text())
    assert rows and all(re.fullmatch(r"−?\d+\.\d min", t) for t, *_ in rows)
    printed = re.findall(r"Z load (\S+) min device (\d+): (?!temperature )(.*)", stream.getvalue())
    assert any(message == "clock event: sw_thermal" for *_, message in printed)
    for minute, device, message in printed:
        found = [
            (t, where, kind, text)
            for t, where, kind, text in rows
            if where == f"GPU {device}" and text.removeprefix(f"device {device}: ") == message
        ]
        assert found, (minute, device, message)
        assert found[0][0] == f"{minute} min", (found, minute)
