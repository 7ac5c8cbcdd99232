"""Every row of docs/simulator.md's calibration tables: the simulated server's statistic
within its band, computed by the same function as on the recording (``testkit.calibration``),
and the recording's own figure inside the band it sets."""

import pytest

from testkit.calibration import ROWS, Row

pytestmark = pytest.mark.slow  # fifteen simulated servers and three recordings


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"{r.sku}: {r.statistic}")
def test_the_simulator_reproduces_the_recording_within_the_band(row: Row) -> None:
    lo, hi = row.band
    recorded, simulated = row.recorded(), row.simulated()
    assert lo <= recorded <= hi, f"the band does not hold the recording's {recorded:{row.fmt}}"
    assert lo <= simulated <= hi, f"simulated {simulated:{row.fmt}}, recorded {recorded:{row.fmt}}"
