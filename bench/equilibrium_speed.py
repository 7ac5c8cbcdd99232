"""What the offline equilibrium pass costs on a big run: ``detect`` over every device of
an 8-GPU 24-hour store (``bench/report_scale.py``'s synthetic run: one device never
settles, the others are watched for a day), timed inside the analysis (only its calls).

With ``--against DIR`` (another checkout of soak, e.g. main), both checkouts run in
turn, ``--rounds`` times each, alternating, so that the machine's load hits both alike;
the table gives each one's median wall and CPU seconds and says whether the two found the
same dates, confirmations, withdrawals and reasons. ``--store DIR`` reuses (or keeps) the
synthesised run folder. Prints a table and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from report_scale import synthesise  # noqa: E402

CHILD = """
import importlib, json, sys, time
from pathlib import Path
analyze = importlib.import_module("soak.analysis.analyze")
try:
    from soak.profile import Profile
except ImportError:  # a checkout from before the profile had a module of its own
    from soak.config import Profile
from soak.store import RunStore
spent, dates = [0.0, 0.0], []
inner = analyze.detect
def timed(*args):
    wall, cpu = time.perf_counter(), time.process_time()
    eq = inner(*args)
    spent[0] += time.perf_counter() - wall
    spent[1] += time.process_time() - cpu
    dates.append([eq.time_s, eq.confirmed_s, [[w.time_s, w.at_s] for w in eq.withdrawn], eq.reason])
    return eq
analyze.detect = timed
try:
    from soak.pipeline import analyze as analyse_store
except ImportError:  # a checkout from before the pipeline had a module of its own
    analyse_store = analyze.analyze
store = RunStore.open(Path(sys.argv[1]))
analyse_store(store, Profile())
store.close_read()
print(json.dumps({"wall_s": spent[0], "cpu_s": spent[1], "dates": dates}))
"""


def one(checkout: Path, run_dir: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(run_dir)],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", type=Path, help="another checkout, run in turn with this")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--store", type=Path, help="the run folder to reuse or keep")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = args.store or Path(tmp) / "run"
        if not (run_dir / "soak.sqlite").exists():
            run_dir.mkdir(parents=True, exist_ok=True)
            synthesise(run_dir, args.hours, 8)
        checkouts = {"this": ROOT}
        if args.against is not None:
            checkouts = {"against": args.against.resolve(), "this": ROOT}
        runs: dict[str, list[dict]] = {name: [] for name in checkouts}
        for _ in range(args.rounds):
            for name, checkout in checkouts.items():
                runs[name].append(one(checkout, run_dir))
    rows = {}
    print(f"{'checkout':>8} {'wall s':>7} {'cpu s':>6}  {'(median of ' + str(args.rounds) + ')'}")
    for name, results in runs.items():
        wall = statistics.median(r["wall_s"] for r in results)
        cpu = statistics.median(r["cpu_s"] for r in results)
        rows[name] = {"checkout": str(checkouts[name]), "wall_s": wall, "cpu_s": cpu}
        print(f"{name:>8} {wall:>7.2f} {cpu:>6.2f}  {checkouts[name]}")
    same = len({json.dumps(r[0]["dates"]) for r in runs.values()}) == 1
    if args.against is not None:
        print(f"same dates, confirmations, withdrawals and reasons: {'yes' if same else 'NO'}")
    print(json.dumps({"bench": "equilibrium_speed", "hours": args.hours, "gpus": 8, **rows}))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
