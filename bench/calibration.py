"""The simulated server against the recordings it is calibrated to: per SKU, each
statistic as recorded, as simulated (the median of ``testkit.calibration.SEEDS`` one-GPU
servers) and the band the simulated figure must fall in, as docs/simulator.md's tables have
them (``tests/devices/test_sim_calibration.py`` holds every row). Prints a Markdown table
per SKU, then one JSON line."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from testkit.calibration import RECORDING_NOTES, ROWS


def main() -> int:
    out = []
    for sku in dict.fromkeys(r.sku for r in ROWS):
        rows = [r for r in ROWS if r.sku == sku]
        print(f"\n{sku}: {'; '.join(dict.fromkeys(RECORDING_NOTES[r.recording] for r in rows))}\n")
        print("| statistic | recording | simulator | band |")
        print("|---|---|---|---|")
        for r in rows:
            rec, sim = r.recorded(), r.simulated()
            lo, hi = r.band
            ok = lo <= sim <= hi
            band = f"{lo:{r.fmt}} – {hi:{r.fmt}}"
            mark = "" if ok else " **out**"
            print(f"| {r.statistic} | {rec:{r.fmt}} | {sim:{r.fmt}}{mark} | {band} |")
            out.append(
                {
                    "sku": sku,
                    "statistic": r.statistic,
                    "recording": rec,
                    "simulator": sim,
                    "band": r.band,
                    "in_band": ok,
                }
            )
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
