"""A device's load starts when its first step is done: the warm-up before it (imports,
calibration, a first step slowed by compilation or autotuning) is not load (issue 19)."""

import numpy as np

from soak.analysis.analyze import _load_span
from soak.analysis.windows import cold_window
from soak.profile import Windows


def _part(spans):
    t = np.array(spans, dtype=float)
    return {"t_start_s": t[:, 0], "t_end_s": t[:, 1], "work": np.ones(len(spans))}


def test_the_first_step_is_warm_up_and_the_cold_window_follows_it():
    # launched at 10 s; the first step took 30 s (autotuning), then 1-second steps
    work = {"gemm": _part([(12.0, 42.0)] + [(42.0 + i, 43.0 + i) for i in range(200)])}
    start, end = _load_span(work, np.empty(0), {"load_start_s": 10.0})
    assert (start, end) == (42.0, 242.0)
    cold = cold_window(start, Windows())
    assert cold.start_s >= 42.0  # the slow first step is never in the cold window


def test_parts_taking_turns_start_when_each_has_done_its_first_block():
    work = {
        "train": _part([(20.0, 27.0), (53.0, 60.0)]),
        "gemm": _part([(27.0, 37.0), (60.0, 70.0)]),
        "membw": _part([(37.0, 49.0), (70.0, 82.0)]),
    }
    start, _ = _load_span(work, np.empty(0), {})
    assert start == 49.0
