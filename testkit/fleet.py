"""A simulated fleet for tests and ``bench/fleet_scale.py``: summary.json files of many
servers, synthesised from a few real simulated soaks (``fleet_fixtures/``, each the summary.json
of `soak run --backend sim --minutes 30 --workload gemm --baseline 0 --seed N [--sim-fault
...]`, the command recorded in it).

Running 64 (or 256) soaks would take 20 s each on a CI machine; instead each healthy server
is a copy of one of the two healthy runs with every device's steady figures scaled by its
own factor (normal, σ = 0.5 %, the device-to-device spread a real fleet adds to the run's
own), and new host names, UUIDs and serials. The faulty servers are the real fault runs,
renamed only, so their verdicts and figures are what soak itself wrote.
"""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).parent / "fleet_fixtures"
HEALTHY = ("sim-8gpu-gemm-healthy-seed1.json", "sim-8gpu-gemm-healthy-seed2.json")
FAULTS = (
    "sim-8gpu-gemm-airflow-gpu2.json",
    "sim-8gpu-gemm-ecc-gpu5.json",
    "sim-8gpu-gemm-hw-slowdown-gpu1.json",
    "sim-8gpu-gemm-slow-gpu3-0.945.json",
)


def load(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name).read_text())


def host_name(i: int) -> str:
    return f"gpu{i:03d}"


def _rename(data: dict[str, Any], host: str, number: int, rack_size: int) -> None:
    data["run"]["host"] = host
    data["run"]["tags"] = {"rack": f"r{number // rack_size + 1}", "slot": str(number % rack_size)}
    for d in data["devices"]:
        d["uuid"] = f"GPU-synth-{number:04d}-{d['index']:02d}"
        if d.get("inventory"):
            d["inventory"]["serial"] = f"SYN{number:04d}{d['index']:02d}"


def _jitter(data: dict[str, Any], rng: random.Random, sigma: float) -> None:
    for d in data["devices"]:
        f = rng.gauss(1.0, sigma)
        for window in ("cold", "steady"):
            rates = d[window]["throughput"]
            for part in rates:
                rates[part] *= f


def write_fleet(
    out: Path,
    servers: int,
    faulty_at: dict[int, str] | None = None,
    seed: int = 0,
    rack_size: int = 16,
    started_utc: str = "2026-12-01T08:00:00Z",
) -> dict[str, str]:
    """Write ``out/<host>/<stamp>/summary.json`` for ``servers`` servers; ``faulty_at`` maps
    a server number to a fault fixture. Returns host -> fixture used."""
    rng = random.Random(seed)
    faulty_at = faulty_at or {}
    bases = {name: load(name) for name in (*HEALTHY, *set(faulty_at.values()))}
    used = {}
    for i in range(servers):
        name = faulty_at.get(i) or HEALTHY[i % len(HEALTHY)]
        data = copy.deepcopy(bases[name])
        if name in HEALTHY:
            _jitter(data, rng, 0.005)
        host = host_name(i)
        _rename(data, host, i, rack_size)
        data["run"]["started_utc"] = started_utc
        folder = out / host / started_utc.replace("-", "").replace(":", "")
        folder.mkdir(parents=True)
        (folder / "summary.json").write_text(json.dumps(data))
        used[host] = name
    return used
