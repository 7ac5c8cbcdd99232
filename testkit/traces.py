"""Where the real public traces are: those whose licences allow it travel with the project
(``bench/data/real-traces/``, each with its provenance and licence); the others are found
only in a directory named by ``SOAK_REAL_TRACES`` (the same folder names)."""

from __future__ import annotations

import os
from pathlib import Path

SHIPPED = Path(__file__).resolve().parents[1] / "bench" / "data" / "real-traces"


def trace_dir(name: str) -> Path | None:
    """The folder of the trace ``name``, or None where it is not on this machine."""
    for root in (os.environ.get("SOAK_REAL_TRACES"), SHIPPED):
        if root and (Path(root) / name).is_dir():
            return Path(root) / name
    return None


def missing_reason(name: str) -> str:
    """Why ``name`` is not here, in one line (for a skip or the bench's table)."""
    where = os.environ.get("SOAK_REAL_TRACES")
    look = f"{SHIPPED} or {where}" if where else f"{SHIPPED} (set SOAK_REAL_TRACES to add a folder)"
    return f"trace {name} not found in {look}; see bench/data/real-traces/README.md"


def h100_csv_options():
    """How the H100 nanoGPT traces' CSV columns map to soak's fields (one long file per run)."""
    from soak.importers.csv import CsvOptions

    return CsvOptions(
        time_col="timestamp",
        time_unit="iso",
        device_col="gpu_index",
        mapping={
            "temp_c": "temperature_C",
            "util_pct": "utilization_gpu_percent",
            "power_w": "power_W",
        },
    )
