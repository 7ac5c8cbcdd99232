"""Time `soak fleet report` over a delivery of 256 servers × 8 GPUs (2,048 devices) and
check it stays under 60 s and 1 GiB of memory, with 64 servers side by side for the ratio
(how the report scales with the fleet).

The fleet is synthesised (testkit/fleet.py) from real simulated soaks' summary.json files,
each device's figures varied, with four faulty servers; the report runs in a child process
(`soak fleet report DIR`, history included), so its peak RSS is its own. Prints a table and a
JSON line.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from testkit.fleet import FAULTS, write_fleet  # noqa: E402

LIMIT_S, LIMIT_MIB = 60.0, 1024.0

CHILD = """
import json, resource, sys, time, io, contextlib
from soak.cli import main
start = time.perf_counter()
with contextlib.redirect_stdout(io.StringIO()):
    rc = main(["fleet", "report", sys.argv[1]])
wall = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"wall_s": wall, "peak_rss_mib": peak, "rc": rc}))
"""


def measure(servers: int, tmp: Path) -> dict[str, float]:
    out = tmp / f"fleet{servers}"
    write_fleet(out, servers, {5: FAULTS[0], 20: FAULTS[1], 41: FAULTS[2], 60: FAULTS[3]})
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(out)],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    result = json.loads(child.stdout.strip().splitlines()[-1])
    result["html_mb"] = (out / "fleet.html").stat().st_size / 1e6
    result["json_mb"] = (out / "fleet.json").stat().st_size / 1e6
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--servers", type=int, default=256)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        small = measure(64, Path(tmp))
        big = measure(args.servers, Path(tmp))
    ok = big["wall_s"] < LIMIT_S and big["peak_rss_mib"] < LIMIT_MIB
    rows = [
        ("servers × 8 GPUs", "64", str(args.servers), ""),
        (
            "fleet report wall time",
            f"{small['wall_s']:.1f} s",
            f"{big['wall_s']:.1f} s",
            f"< {LIMIT_S:.0f} s",
        ),
        (
            "peak memory (RSS)",
            f"{small['peak_rss_mib']:.0f} MiB",
            f"{big['peak_rss_mib']:.0f} MiB",
            f"< {LIMIT_MIB:.0f} MiB",
        ),
        ("fleet.html", f"{small['html_mb']:.2f} MB", f"{big['html_mb']:.2f} MB", ""),
        ("fleet.json", f"{small['json_mb']:.2f} MB", f"{big['json_mb']:.2f} MB", ""),
    ]
    width = max(len(r[0]) for r in rows)
    for label, a, b, limit in rows:
        print(f"{label:<{width}}  {a:>12}  {b:>12}  {limit}")
    ratio = big["wall_s"] / small["wall_s"]
    print(
        f"time ratio {args.servers} / 64 servers: {ratio:.2f} "
        f"(linear would be {args.servers / 64:g})"
    )
    print("within limits" if ok else "OVER A LIMIT")
    print(
        json.dumps(
            {
                "bench": "fleet_scale",
                "servers": args.servers,
                "gpus": args.servers * 8,
                "report_s": round(big["wall_s"], 2),
                "peak_rss_mib": round(big["peak_rss_mib"], 1),
                "report_s_64": round(small["wall_s"], 2),
                "ratio": round(ratio, 2),
                "html_mb": round(big["html_mb"], 2),
                "ok": ok,
            }
        )
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
