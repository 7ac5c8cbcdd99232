"""What watching costs the sampling loop: a simulated 8-GPU soak's time per tick with no
watcher, with the plain-line view, and with the Prometheus exporter scraped over HTTP every
1 s of wall time (Prometheus' shortest usual scrape interval) and every 0.1 s (a stress: on
the virtual clock each wall second is hundreds of ticks, so this is far more scraping per
tick than any real run sees). The scraper is another thread of the same process, as
Prometheus' requests are served by the exporter's thread during a real soak. Runs alternate,
side by side in one process, so the machine's noise hits all of them alike; the ratio to
"no watcher" is the figure.

The second table is the real case, ten times faster: the simulated server on the wall clock,
ticking every 0.1 s, scraped every 1.5 s (a 1-s soak under Prometheus' default 15-s scrape
interval) and every 0.1 s (one scrape per tick: a 1-s scrape interval, the worst usual case),
with the work of each tick timed inside the loop.

The third figure is the equilibrium detector's share of the tick: one simulated 8-GPU soak
with every call into the online detector (readings in, checks made) timed, against the
tick's own time.

The fourth table is the validity stage (soak/validity.py: every reading screened against its
plausible range in the store and the runner, and the freeze watch): the same virtual-clock
run with the stage as it is and with it switched off, alternating. ``validity`` as the
second argument runs only that table. Prints the tables and one JSON line.

The fifth table is the live loop's cost in the run's length (``--long [HOURS]``, default
161): one simulated 8-GPU soak on the virtual clock run to hour 160 and past, its ticks
timed through the runner's own loop (a block of ticks at a time: ``Runner.tick_block``),
the time per tick, the equilibrium detector's share of it, the process's VmRSS and the cost
of a look of the sequential stop taken over hour 1 and over hour 160 (the run's last whole
hour), side by side, with their ratios (the targets: the tick at hour 160
within 10 % of hour 1, the RSS too, the equilibrium's share at most 5 %).

``python bench/live_overhead.py [ROUNDS]`` (default 3); ``--equilibrium-only`` runs the
third figure alone, ``--long [HOURS]`` the fifth.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from soak import store as store_module
from soak.analysis.decision import LiveStop
from soak.analysis.equilibrium import OnlineDetector
from soak.clock import WallClock
from soak.config import RunConfig
from soak.live.exporter import MetricsExporter
from soak.live.view import PlainView
from soak.progress import Progress
from soak.record import RunRecord
from soak.runner import Runner, run

HOURS = 1.0
GPUS = 8
SCRAPE_EVERY_S = {"exporter, 1 s": 1.0, "exporter, 0.1 s": 0.1}


class Ticks:
    """Counts ticks (a watcher that does nothing else)."""

    def __init__(self) -> None:
        self.n = 0

    def update(self, progress: Progress) -> None:
        self.n += 1

    def close(self) -> None:
        pass


def scraper(url: str, stop: threading.Event, every_s: float = 0.1) -> list[int]:
    sizes: list[int] = []

    def loop() -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError):
                sizes.append(len(urllib.request.urlopen(url, timeout=5).read()))
            stop.wait(every_s)

    threading.Thread(target=loop, daemon=True).start()
    return sizes


def one(kind: str, out: Path) -> dict:
    config = RunConfig(
        backend="sim", workload="mix", duration_s=HOURS * 3600, seed=1, out=out, sim_gpus=GPUS
    )
    ticks = Ticks()
    watchers: list = [ticks]
    stop = threading.Event()
    sizes: list[int] = []
    if kind == "plain view":
        watchers.append(PlainView(io.StringIO()))
    elif kind.startswith("exporter"):
        exporter = MetricsExporter(0)
        watchers.append(exporter)
        sizes = scraper(exporter.url, stop, SCRAPE_EVERY_S[kind])
    start = time.perf_counter()
    run(config, watchers=watchers)
    wall = time.perf_counter() - start
    stop.set()
    return {"kind": kind, "us_per_tick": 1e6 * wall / ticks.n, "scrapes": len(sizes)}


PACED_SCRAPE_S = {"none": None, "exporter, 1.5 s": 1.5, "exporter, 0.1 s": 0.1}


def paced(kind: str, out: Path, seconds: float = 20.0) -> list[float]:
    """Each tick's work time (s) of a wall-clock run ticking every 0.1 s."""
    config = RunConfig(
        backend="sim",
        workload="mix",
        duration_s=seconds,
        baseline_s=0.0,
        interval_s=0.1,
        seed=1,
        out=out,
        sim_gpus=GPUS,
    )
    times: list[float] = []
    original = Runner.tick

    def timed(self: Runner, load) -> None:
        start = time.perf_counter()
        original(self, load)
        times.append(time.perf_counter() - start)

    watchers: list = []
    stop = threading.Event()
    every_s = PACED_SCRAPE_S[kind]
    if every_s is not None:
        exporter = MetricsExporter(0)
        watchers.append(exporter)
        scraper(exporter.url, stop, every_s)
    Runner.tick = timed  # type: ignore[method-assign]
    try:
        run(config, clock=WallClock(), watchers=watchers)
    finally:
        Runner.tick = original  # type: ignore[method-assign]
        stop.set()
    return times


def equilibrium_share(out: Path, hours: float = HOURS) -> dict:
    """The online detector's share of the tick: its calls timed inside a simulated soak."""
    config = RunConfig(
        backend="sim", workload="mix", duration_s=hours * 3600, seed=1, out=out, sim_gpus=GPUS
    )
    spent = {"tick": 0.0, "detector": 0.0}
    originals = {name: getattr(OnlineDetector, name) for name in DETECTOR_CALLS}
    tick = Runner.tick
    tick_block = Runner.tick_block

    def timed(kind: str, fn):
        def call(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[kind] += time.perf_counter() - start

        return call

    for name, fn in originals.items():
        setattr(OnlineDetector, name, timed("detector", fn))
    Runner.tick = timed("tick", tick)  # type: ignore[method-assign]
    Runner.tick_block = timed("tick", tick_block)  # type: ignore[method-assign]
    try:
        run(config)
    finally:
        Runner.tick = tick  # type: ignore[method-assign]
        Runner.tick_block = tick_block  # type: ignore[method-assign]
        for name, fn in originals.items():
            setattr(OnlineDetector, name, fn)
    share = spent["detector"] / spent["tick"]
    print(f"\nequilibrium detector: {spent['detector']:.2f} s of {spent['tick']:.2f} s of ticks")
    print(f"share of the tick: {100 * share:.1f} % ({GPUS} GPUs, {hours:g} h simulated)")
    return {"detector_s": spent["detector"], "tick_s": spent["tick"], "share": share}


# Every call into the online detector: readings and rates in (a row or a block), checks made.
DETECTOR_CALLS = ("add_telemetry", "add_rate", "add_columns", "add_rates", "update")


def rss_mib() -> float:
    """This process's resident memory now (Linux ``/proc/self/status``)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def long_run(out: Path, hours: float = 161.0) -> dict:
    """The live loop at hour 1 and at hour 160 of one simulated soak: per mark hour, its
    ticks' time (ms per tick), the detector's share of it, VmRSS at its end, and what a look
    of the sequential stop costs there (``LiveStop``, fed as ``--until-steady`` feeds it,
    looked at once per block of the mark hour, outside the ticks' time)."""
    config = RunConfig(
        backend="sim", workload="mix", duration_s=hours * 3600, seed=1, out=out, sim_gpus=GPUS
    )
    marks = (1, max(2, math.ceil(hours) - 1))  # hour 1 and the last whole hour
    spans = {
        h: {"tick_s": 0.0, "detector_s": 0.0, "ticks": 0, "rss_mib": None, "looks": []}
        for h in marks
    }
    state = {"hour": None}
    originals = {name: getattr(OnlineDetector, name) for name in DETECTOR_CALLS}
    tick, tick_block = Runner.tick, Runner.tick_block
    record_start = Runner.record_start

    def with_stop(self: Runner) -> None:
        record_start(self)
        run_record = RunRecord(workload=self.config.workload)
        self.stop = LiveStop(
            self.config.profile, run_record, self.devices, self.detectors, self.live_work
        )

    def detector(fn):
        def call(*args, **kwargs):
            if state["hour"] is None:
                return fn(*args, **kwargs)
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spans[state["hour"]]["detector_s"] += time.perf_counter() - start

        return call

    def timed(fn, block: bool):
        def call(self: Runner, load, *rest):
            t = self.now_s()
            hour = int(t // 3600) if t >= 0 else None
            state["hour"] = hour if hour in spans else None
            start = time.perf_counter()
            fn(self, load, *rest)
            spent = time.perf_counter() - start
            if state["hour"] is not None:
                span = spans[state["hour"]]
                span["tick_s"] += spent
                span["ticks"] += len(rest[0]) if block else 1
                span["rss_mib"] = rss_mib()
                if self.stop is not None and self.load is not None:
                    start = time.perf_counter()
                    self.stop.decide(self.active_devices(self.load), self.now_s())
                    span["looks"].append(time.perf_counter() - start)
            state["hour"] = None

        return call

    for name, fn in originals.items():
        setattr(OnlineDetector, name, detector(fn))
    Runner.tick = timed(tick, False)  # type: ignore[method-assign]
    Runner.tick_block = timed(tick_block, True)  # type: ignore[method-assign]
    Runner.record_start = with_stop  # type: ignore[method-assign]
    start = time.perf_counter()
    try:
        run(config)
    finally:
        Runner.tick, Runner.tick_block = tick, tick_block  # type: ignore[method-assign]
        Runner.record_start = record_start  # type: ignore[method-assign]
        for name, fn in originals.items():
            setattr(OnlineDetector, name, fn)
    wall = time.perf_counter() - start
    rows = {}
    for hour, span in spans.items():
        ticks = span["ticks"]
        rows[hour] = {
            "hour": hour,
            "ticks": ticks,
            "ms_per_tick": 1e3 * span["tick_s"] / ticks if ticks else None,
            "detector_share": span["detector_s"] / span["tick_s"] if span["tick_s"] else None,
            "rss_mib": span["rss_mib"],
            "look_ms": 1e3 * statistics.median(span["looks"]) if span["looks"] else None,
        }
    first, last = (rows[h] for h in marks)
    print(f"\nthe live loop over a {hours:g}-h simulated soak ({GPUS} GPUs, {wall:.0f} s wall)")
    print(f"{'hour':>6} {'ticks':>6} {'ms/tick':>8} {'detector':>9} {'RSS MiB':>8} {'look ms':>8}")
    for r in rows.values():
        share = r["detector_share"]
        shown = "–" if share is None else f"{100 * share:.1f} %"
        rss = "–" if r["rss_mib"] is None else f"{r['rss_mib']:.0f}"
        ms = "–" if r["ms_per_tick"] is None else f"{r['ms_per_tick']:.3f}"
        look = "–" if r["look_ms"] is None else f"{r['look_ms']:.1f}"
        print(f"{r['hour']:>6} {r['ticks']:>6} {ms:>8} {shown:>9} {rss:>8} {look:>8}")
    ratio_tick = (
        last["ms_per_tick"] / first["ms_per_tick"]
        if first["ms_per_tick"] and last["ms_per_tick"]
        else None
    )
    ratio_rss = last["rss_mib"] / first["rss_mib"] if first["rss_mib"] and last["rss_mib"] else None
    shown_rss = "not available" if ratio_rss is None else f"{ratio_rss:.3f}"
    shown_tick = "not available" if ratio_tick is None else f"{ratio_tick:.3f}"
    print(f"hour {marks[1]} / hour {marks[0]}: tick {shown_tick}, RSS {shown_rss}")
    return {
        "hours": hours,
        "wall_s": wall,
        "marks": list(rows.values()),
        "tick_ratio": ratio_tick,
        "rss_ratio": ratio_rss,
    }


@contextlib.contextmanager
def validity_off():
    """The run without its validity stage: nothing screened, no freeze watched."""
    saved = store_module.screen_all, Runner.screen, Runner._watch_freeze
    store_module.screen_all = lambda rows, limits=None: []  # type: ignore[assignment]
    Runner.screen = lambda self, telemetry: []  # type: ignore[method-assign]
    Runner._watch_freeze = lambda self, telemetry: []  # type: ignore[method-assign]
    try:
        yield
    finally:
        store_module.screen_all, Runner.screen, Runner._watch_freeze = saved


def validity_table(rounds: int) -> list[dict]:
    results: dict[str, list[float]] = {"off": [], "on": []}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(rounds):
            with validity_off():
                results["off"].append(one("none", Path(tmp))["us_per_tick"])
            results["on"].append(one("none", Path(tmp))["us_per_tick"])
    base = statistics.median(results["off"])
    print(f"\n{'validity stage':>16} {'µs/tick (median)':>17} {'ratio to off':>13}")
    rows = []
    for kind, us_all in results.items():
        us = statistics.median(us_all)
        rows.append({"validity": kind, "us_per_tick": us, "ratio": us / base})
        print(f"{kind:>16} {us:>17.0f} {us / base:>13.3f}")
    return rows


def main() -> None:
    if "--long" in sys.argv:
        rest = sys.argv[sys.argv.index("--long") + 1 :]
        hours = float(rest[0]) if rest else 161.0
        with tempfile.TemporaryDirectory() as tmp:
            found = long_run(Path(tmp), hours)
        print(json.dumps({"bench": "live_overhead", "gpus": GPUS, "long": found}))
        return
    if "--equilibrium-only" in sys.argv:
        with tempfile.TemporaryDirectory() as tmp:
            share = equilibrium_share(Path(tmp))
        print(json.dumps({"bench": "live_overhead", "equilibrium": share}))
        return
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    if sys.argv[2:] == ["validity"]:
        rows = validity_table(rounds)
        print(
            json.dumps({"bench": "live_overhead", "hours": HOURS, "gpus": GPUS, "validity": rows})
        )
        return
    kinds = ("none", "plain view", *SCRAPE_EVERY_S)
    results: dict[str, list[dict]] = {k: [] for k in kinds}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(rounds):
            for kind in kinds:
                results[kind].append(one(kind, Path(tmp)))
    base = statistics.median(r["us_per_tick"] for r in results["none"])
    rows = []
    print(f"{'watcher':>16} {'µs/tick (median)':>17} {'ratio to none':>14} {'scrapes':>8}")
    for kind in kinds:
        us = statistics.median(r["us_per_tick"] for r in results[kind])
        scrapes = sum(r["scrapes"] for r in results[kind])
        rows.append({"watcher": kind, "us_per_tick": us, "ratio": us / base, "scrapes": scrapes})
        print(f"{kind:>16} {us:>17.0f} {us / base:>14.3f} {scrapes:>8}")
    paced_rows = []
    with tempfile.TemporaryDirectory() as tmp:
        ticks: dict[str, list[float]] = {k: [] for k in PACED_SCRAPE_S}
        for _ in range(rounds):
            for kind in ticks:
                ticks[kind] += paced(kind, Path(tmp))
    base_ms = 1e3 * statistics.mean(ticks["none"])
    print(f"\n{'wall clock':>16} {'ticks':>6} {'mean ms/tick':>13} {'median':>7} {'ratio':>6}")
    for kind, t in ticks.items():
        mean_ms, med_ms = 1e3 * statistics.mean(t), 1e3 * statistics.median(t)
        paced_rows.append(
            {
                "watcher": kind,
                "ticks": len(t),
                "mean_ms": mean_ms,
                "median_ms": med_ms,
                "ratio": mean_ms / base_ms,
            }
        )
        print(f"{kind:>16} {len(t):>6} {mean_ms:>13.2f} {med_ms:>7.2f} {mean_ms / base_ms:>6.3f}")
    with tempfile.TemporaryDirectory() as tmp:
        share = equilibrium_share(Path(tmp))
    validity = validity_table(rounds)
    print(
        json.dumps(
            {
                "bench": "live_overhead",
                "hours": HOURS,
                "gpus": GPUS,
                "virtual": rows,
                "wall_clock": paced_rows,
                "equilibrium": share,
                "validity": validity,
            }
        )
    )


if __name__ == "__main__":
    main()
