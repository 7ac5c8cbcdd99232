"""Captions and legends describe what is drawn on that backend, and nothing else: a CPU's
heat map reads as the rest, and every mark a caption names is drawn (issue 43)."""

from __future__ import annotations

import re
import sqlite3

import numpy as np

from soak.pipeline import build_outputs
from soak.report.figures import held
from soak.runner import run
from soak.store import STORE_NAME


def _captions(report: str) -> list[str]:
    return [
        " ".join(c.split()) for c in re.findall(r"<figcaption>(.*?)</figcaption>", report, re.S)
    ]


def _like_a_cpu(run_dir) -> None:
    """A CPU's store: no temperature sensor, and its mix's gemm done in turns with the other
    parts, one sample every 13 s."""
    conn = sqlite3.connect(run_dir / STORE_NAME)
    with conn:
        conn.execute("UPDATE telemetry SET temp_c=NULL, mem_temp_c=NULL")
        conn.execute("UPDATE capabilities SET status='not supported' WHERE metric LIKE '%temp%'")
        conn.execute("DELETE FROM work WHERE part='gemm' AND CAST(t_end_s AS INTEGER) % 13 != 0")
    conn.close()


def test_a_cpu_heat_map_reads_as_the_rest_and_its_caption_says_only_what_is_drawn(sim_config):
    # tick by tick, as a real run stores it: ``_like_a_cpu`` edits the telemetry rows
    result = run(sim_config(workload="mix", duration_s=180.0, sim_gpus=1), block_ticks=1)
    _like_a_cpu(result.run_dir)
    _, report = build_outputs(result.run_dir)
    heat = next(c for c in _captions(report.read_text()) if c.startswith("Device × time"))
    assert heat == (
        "Device × time, in each time bin: the lowest gemm (in % of the server's median cold "
        "value; each work sample stands for the time halfway to the next, so a part that takes "
        "turns with others is drawn throughout), so that a brief event still colours its cell."
    )  # no "Blank": gemm ran throughout; no hottest reading, no hot-spot rule: no sensor


def test_a_rate_measured_once_a_turn_colours_every_bin_it_stands_for():
    t = np.arange(0.0, 181.0, 13.0)  # one gemm sample a turn
    rate = np.full(t.size, 100.0)
    rate[5] = 60.0
    edges = np.linspace(0.0, 169.0, 170)  # one bin a second, to the last sample
    cells = held(t, rate, edges, "min")
    assert np.isfinite(cells).all()
    assert np.flatnonzero(cells == 60.0).tolist() == list(range(58, 72))  # 65 s ± 6.5 s
    late = [7, 8, 9, 10, 11]  # 91 s without a sample, seven turns: a gap, left blank
    gap = held(np.delete(t, late), np.delete(rate, late), edges, "min")
    assert np.isnan(gap[90:140]).all() and np.isfinite(gap[:80]).all()


def test_the_timeline_names_the_equilibrium_line_only_where_it_is_drawn(sim_config):
    result = run(sim_config(workload="gemm", duration_s=180.0, sim_gpus=1))
    _, report = build_outputs(result.run_dir)
    (timeline,) = [c for c in _captions(report.read_text()) if c.startswith("Blue band")]
    assert timeline.startswith("Blue band: cold window; orange band: steady window. Lines are")
    assert "equilibrium" not in timeline  # 3 minutes of load: none reached, no line drawn
