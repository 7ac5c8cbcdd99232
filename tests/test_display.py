"""Progress lines: each part's rate in its own unit, unreadable readings as n/a."""

import io
from pathlib import Path

from soak.config import RunConfig
from soak.display import LiveDisplay, LogDisplay, device_lines
from soak.runner import run


class Capture(LiveDisplay):
    def __init__(self, at_s: float) -> None:
        super().__init__(io.StringIO(), 0)
        self.at_s, self.lines = at_s, []

    def update(self, runner, t_s):
        if not self.lines and t_s >= self.at_s:
            self.lines = device_lines(runner, t_s)


def test_live_lines_carry_each_parts_unit(tmp_path: Path) -> None:
    shown = Capture(at_s=120)
    config = RunConfig(
        backend="sim", workload="mix", duration_s=180, seed=1, out=tmp_path, sim_gpus=2
    )
    run(config, display=shown)
    assert len(shown.lines) == 2
    for line in shown.lines:
        assert "FLOP/s" in line and "B/s" in line and "token/s" in line and "°C" in line


def test_log_display_writes_one_line_per_minute(tmp_path: Path) -> None:
    stream = io.StringIO()
    config = RunConfig(
        backend="sim",
        workload="gemm",
        duration_s=600,
        seed=1,
        out=tmp_path,
        sim_gpus=2,
        baseline_s=0,
    )
    run(config, display=LogDisplay(stream))
    lines = stream.getvalue().splitlines()
    assert 10 <= len(lines) <= 12 and all(line.startswith("soak: t=") for line in lines)
