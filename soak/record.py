"""The run's own records in the store's meta table, typed: what ``soak run`` or ``soak import``
recorded at the start (``RunRecord``, meta ``"run"``) and how the load stopped
(``StopRecord``, meta ``"stop"``), the sequential stop of ``--until-steady``
(``StopDecision``, meta ``"stop_decision"``), the BMC's probe (``BmcProbe``, meta ``"bmc"``) and a
multi-node ddp group (``DdpGroup``, meta ``"ddp_group"``); ``RunMeta`` is the whole table,
read once by the store, with what a salvage of a damaged store got back (``Salvage``).
Every writer and every reader goes through this module.

``to_json`` writes the layout the store has always held (docs/summary-schema.md, "The run
store's records"); ``from_json`` reads every layout written since store version 1. A key that
an older writer did not record reads as None (never 0, never False); a key this soak does not
know is kept in ``extra`` and written back, so that a newer writer's facts survive a read and
a write. A value of the wrong JSON type is a ``ValueError`` naming the key: the store reports
it as a damaged store.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from soak.model import Capability, StopReason

RUN_KEY = "run"
STOP_KEY = "stop"
DECISION_KEY = "stop_decision"  # the sequential stop of --until-steady (StopDecision)


class _Reader:
    """Typed reads of one JSON object, each key once; what is left over is ``extra``."""

    def __init__(self, what: str, data: object) -> None:
        if not isinstance(data, Mapping):
            raise ValueError(f"{what} is a {type(data).__name__}, not an object")
        self.what = what
        self.left = dict(data)

    def _take(self, key: str, kinds: tuple[type, ...], kind_name: str) -> Any:
        value = self.left.pop(key, None)
        if value is None:
            return None
        # true is an int to Python, never a number or a count to soak
        if isinstance(value, kinds) and isinstance(value, bool) == (bool in kinds):
            return value
        raise ValueError(f"{self.what} {key!r} is {value!r:.40}, not {kind_name}")

    def text(self, key: str) -> str | None:
        return self._take(key, (str,), "text")

    def number(self, key: str) -> float | None:
        return self._take(key, (int, float), "a number")

    def integer(self, key: str) -> int | None:
        return self._take(key, (int,), "an integer")

    def flag(self, key: str) -> bool | None:
        return self._take(key, (bool,), "true or false")

    def mapping(self, key: str) -> dict[str, Any] | None:
        value = self._take(key, (dict,), "an object")
        return None if value is None else dict(value)

    def texts(self, key: str) -> tuple[str, ...] | None:
        value = self._take(key, (list,), "a list")
        if value is not None and not all(isinstance(v, str) for v in value):
            raise ValueError(f"{self.what} {key!r} holds something other than text")
        return None if value is None else tuple(value)

    def objects(self, key: str) -> list[Any] | None:
        return self._take(key, (list,), "a list")


@dataclass(frozen=True, slots=True)
class SimRecord:
    """The simulated server a ``--backend sim`` run ran on."""

    gpus: int | None = None
    sku: str | None = None
    faults: tuple[str, ...] = ()  # --sim-fault specs, as given
    sensors: str | None = None  # "real" or "ideal"; None: recorded before sensors were chosen
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            **self.extra,
            "gpus": self.gpus,
            "sku": self.sku,
            "faults": list(self.faults),
            "sensors": self.sensors,
        }

    @classmethod
    def from_json(cls, data: object) -> SimRecord:
        read = _Reader("run record's sim", data)
        return cls(
            gpus=read.integer("gpus"),
            sku=read.text("sku"),
            faults=read.texts("faults") or (),
            sensors=read.text("sensors"),
            extra=read.left,
        )


@dataclass(frozen=True, slots=True)
class RunRecord:
    """What a run recorded at its start. None: not recorded (an older writer, or a record
    cut short), never a default that reads as a fact."""

    backend: str | None = None  # "sim", "nvml", "amd", "cpu", "import"
    workload: str | None = None
    started_utc: str | None = None  # "2026-12-01T10:15:00Z"
    seed: int | None = None
    command: str | None = None  # the command line, to reproduce the run
    host: str | None = None
    tags: Mapping[str, Any] = field(default_factory=dict)  # --tag KEY=VALUE
    duration_asked_s: float | None = None  # None: --until-steady without a limit, an import
    until_steady: bool | None = None
    interval_s: float | None = None  # the tick; an import: the trace's median step
    # The run's zero on CLOCK_MONOTONIC (seconds since boot, as dmesg stamps XIDs), so that
    # run times map to kernel log lines; None on a virtual clock, an import, or a store
    # written before it was recorded.
    t0_monotonic_s: float | None = None
    sim: SimRecord | None = None  # None: not a simulated run
    workload_options: Mapping[str, Any] = field(default_factory=dict)  # --option KEY=VALUE
    # Whether the run records throughput by design; an import says so (False: a
    # telemetry-only trace), a live run does not say (None).
    records_throughput: bool | None = None
    # An import's source (file, format, size, sha256, time basis, load segments); None for
    # a live run.
    source: Mapping[str, Any] | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)  # keys this soak does not know

    @property
    def imported(self) -> bool:
        """Whether the run is a trace imported from another tool (``soak import``)."""
        return self.backend == "import" or bool(self.source)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            **self.extra,
            "backend": self.backend,
            "workload": self.workload,
            "started_utc": self.started_utc,
            "seed": self.seed,
            "command": self.command,
            "host": self.host,
            "tags": dict(self.tags),
            "duration_asked_s": self.duration_asked_s,
            "until_steady": self.until_steady,
            "interval_s": self.interval_s,
            "t0_monotonic_s": self.t0_monotonic_s,
            "sim": None if self.sim is None else self.sim.to_json(),
            "workload_options": dict(self.workload_options),
        }
        # Only an import writes these: a live run's record stays as it has always been.
        if self.records_throughput is not None:
            out["records_throughput"] = self.records_throughput
        if self.source is not None:
            out["source"] = dict(self.source)
        return out

    @classmethod
    def from_json(cls, data: object) -> RunRecord:
        read = _Reader("run record", data)
        sim = read.left.pop("sim", None)
        return cls(
            backend=read.text("backend"),
            workload=read.text("workload"),
            started_utc=read.text("started_utc"),
            seed=read.integer("seed"),
            command=read.text("command"),
            host=read.text("host"),
            tags=read.mapping("tags") or {},
            duration_asked_s=read.number("duration_asked_s"),
            until_steady=read.flag("until_steady"),
            interval_s=read.number("interval_s"),
            t0_monotonic_s=read.number("t0_monotonic_s"),
            sim=None if sim is None else SimRecord.from_json(sim),
            workload_options=read.mapping("workload_options") or {},
            records_throughput=read.flag("records_throughput"),
            source=read.mapping("source"),
            extra=read.left,
        )


@dataclass(frozen=True, slots=True)
class StopRecord:
    """How the run's load stopped. A store without one is a run whose coordinator died."""

    # A reason this soak does not know is kept as written; None: the record has none.
    reason: StopReason | str | None = None
    load_stop_s: float | None = None  # on the run's clock
    duration_s: float | None = None  # of the load; None: the load never started
    detail: str | None = None  # e.g. the signal, the error
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            **self.extra,
            "reason": None if self.reason is None else str(self.reason),
            "load_stop_s": self.load_stop_s,
            "duration_s": self.duration_s,
            "detail": self.detail,
        }

    @classmethod
    def from_json(cls, data: object) -> StopRecord:
        read = _Reader("stop record", data)
        reason = read.text("reason")
        return cls(
            reason=None if reason is None else _stop_reason(reason),
            load_stop_s=read.number("load_stop_s"),
            duration_s=read.number("duration_s"),
            detail=read.text("detail"),
            extra=read.left,
        )


@dataclass(frozen=True, slots=True)
class JudgedCheck:
    """One check the sequential stop judged on its interval, as stored: ``check`` what the
    figure is ("steady/cold gemm"), ``ci`` the interval's half-width (None: noise unknown),
    ``unit`` None for a ratio, else the rate's unit; ``outcome`` "pass", "fail" or
    "undecided"."""

    device: int | None = None
    check: str | None = None
    value: float | None = None
    ci: float | None = None
    floor: float | None = None
    unit: str | None = None
    outcome: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return _sorted(
            {
                **self.extra,
                "device": self.device,
                "check": self.check,
                "value": self.value,
                "ci": self.ci,
                "floor": self.floor,
                "unit": self.unit,
                "outcome": self.outcome,
            }
        )

    @classmethod
    def from_json(cls, data: object) -> JudgedCheck:
        read = _Reader("stop decision's check", data)
        return cls(
            device=read.integer("device"),
            check=read.text("check"),
            value=read.number("value"),
            ci=read.number("ci"),
            floor=read.number("floor"),
            unit=read.text("unit"),
            outcome=read.text("outcome"),
            extra=read.left,
        )


@dataclass(frozen=True, slots=True)
class Prediction:
    """A live run's prediction of its verdict: after ``at_load_s`` of load, the load time
    it predicted (None: no prediction yet)."""

    at_load_s: float | None
    verdict_load_s: float | None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return _sorted(
            {**self.extra, "at_load_s": self.at_load_s, "verdict_load_s": self.verdict_load_s}
        )


@dataclass(frozen=True, slots=True)
class StopDecision:
    """The sequential stop of ``--until-steady`` as the run stored it (meta
    ``"stop_decision"``): why and when it fell, every check judged, and, for a live run, its
    predictions against when it stopped; an import's replay says ``replayed``.

    The groups a writer did not write stay absent, never null: ``checks`` None (a replay that
    found no stop judged none), ``predicted`` None (not a live run's), ``replayed`` None,
    so that a stored decision is written back and into summary.json byte for byte."""

    reason: str | None = None
    decided: bool | None = None
    decided_at_s: float | None = None  # on the run's clock; None: not decided
    # What the decision judged (absent together when ``checks`` is None).
    load_s: float | None = None
    confidence: float | None = None
    n_checks: int | None = None
    closest: JudgedCheck | None = None
    undecided: tuple[JudgedCheck, ...] = ()
    checks: tuple[JudgedCheck, ...] | None = None
    # A live run's predictions (absent together when ``predicted`` is None).
    predicted: tuple[Prediction, ...] | None = None
    actual_load_s: float | None = None
    replayed: bool | None = None
    # How long the run went on after the last device settled, and why (absent together
    # where a device was not dated, and in stores written before them).
    after_settled: str | None = None
    settled_at_s: float | None = None  # the last device's equilibrium date (run's clock)
    after_settled_s: float | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            **self.extra,
            "reason": self.reason,
            "decided": self.decided,
            "decided_at_s": self.decided_at_s,
        }
        if self.settled_at_s is not None:
            out |= {
                "after_settled": self.after_settled,
                "settled_at_s": self.settled_at_s,
                "after_settled_s": self.after_settled_s,
            }
        if self.checks is not None:
            out |= {
                "load_s": self.load_s,
                "confidence": self.confidence,
                "n_checks": self.n_checks,
                "closest": None if self.closest is None else self.closest.to_json(),
                "undecided": [c.to_json() for c in self.undecided],
                "checks": [c.to_json() for c in self.checks],
            }
        if self.predicted is not None:
            out["predicted"] = [p.to_json() for p in self.predicted]
            out["actual_load_s"] = self.actual_load_s
        if self.replayed is not None:
            out["replayed"] = self.replayed
        return _sorted(out)

    @classmethod
    def from_json(cls, data: object) -> StopDecision:
        read = _Reader("stop decision", data)
        head = {
            "reason": read.text("reason"),
            "decided": read.flag("decided"),
            "decided_at_s": read.number("decided_at_s"),
        }
        judged = "checks" in read.left
        closest = read.mapping("closest")
        checks = read.objects("checks")
        undecided = read.objects("undecided")
        return cls(
            **head,
            load_s=read.number("load_s"),
            confidence=read.number("confidence"),
            n_checks=read.integer("n_checks"),
            closest=None if closest is None else JudgedCheck.from_json(closest),
            undecided=tuple(JudgedCheck.from_json(c) for c in undecided or ()),
            checks=tuple(JudgedCheck.from_json(c) for c in checks or ()) if judged else None,
            predicted=_predictions(read),
            actual_load_s=read.number("actual_load_s"),
            replayed=read.flag("replayed"),
            after_settled=read.text("after_settled"),
            settled_at_s=read.number("settled_at_s"),
            after_settled_s=read.number("after_settled_s"),
            extra=read.left,
        )


def _predictions(read: _Reader) -> tuple[Prediction, ...] | None:
    if "predicted" not in read.left:
        return None
    out = []
    for entry in read.objects("predicted") or ():
        one = _Reader("stop decision's prediction", entry)
        at, verdict = one.number("at_load_s"), one.number("verdict_load_s")
        out.append(Prediction(at, verdict, one.left))
    return tuple(out)


def _sorted(out: dict[str, Any]) -> dict[str, Any]:
    """Keys in the order the store writes them (sorted), so a record read back and written
    into summary.json is the same bytes."""
    return dict(sorted(out.items()))


def _stop_reason(text: str) -> StopReason | str:
    try:
        return StopReason(text)
    except ValueError:
        return text


@dataclass(frozen=True, slots=True)
class BmcProbe:
    """What the run's probe of its BMC found (meta ``"bmc"``): where the inlet is read from,
    or why it is not available."""

    source: str
    capability: Capability | str  # a status this soak does not know is kept as written
    inlet_sensor: str | None = None
    sensors: tuple[str, ...] = ()
    reason: str | None = None  # why the inlet is not available

    def as_dict(self) -> dict[str, object]:
        return {
            "source": self.source,
            "capability": str(self.capability),
            "inlet_sensor": self.inlet_sensor,
            "sensors": list(self.sensors),
            "reason": self.reason,
        }

    @classmethod
    def from_json(cls, data: object) -> BmcProbe:
        read = _Reader("BMC record", data)
        status = read.text("capability")
        try:
            capability: Capability | str = Capability(status)
        except ValueError:
            capability = status or ""
        return cls(
            source=read.text("source") or "",
            capability=capability,
            inlet_sensor=read.text("inlet_sensor"),
            sensors=read.texts("sensors") or (),
            reason=read.text("reason"),
        )

    @property
    def supported(self) -> bool:
        return self.capability == Capability.SUPPORTED

    @property
    def line(self) -> str:
        """The one line said at the start."""
        if self.capability is Capability.SUPPORTED:
            return f"inlet: {self.inlet_sensor!r} from {self.source}"
        return f"inlet not available: {self.reason}"


@dataclass(frozen=True, slots=True)
class RankPlace:
    """Where one global rank of a multi-node ddp group ran."""

    rank: int
    host: str
    device: int


@dataclass(frozen=True, slots=True)
class DdpGroup:
    """The multi-node ddp group a run was one node of (meta ``"ddp_group"``, written by
    ``soak.nodegroup.record``): every global rank's host and device, the same on every
    node, so that the fleet report can name the host and device of any rank."""

    name: str | None
    node: int
    nodes: int
    master_addr: str
    master_port: int
    torch_port: int
    hosts: tuple[str, ...]  # by node index
    local_ranks: int
    world: int
    # The group's server-level steps (step rate, straggler as a global rank) are recorded by
    # the node of global rank 0 only.
    server_steps_on: str
    ranks: tuple[RankPlace, ...]
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            **self.extra,
            "name": self.name,
            "node": self.node,
            "nodes": self.nodes,
            "master_addr": self.master_addr,
            "master_port": self.master_port,
            "torch_port": self.torch_port,
            "hosts": list(self.hosts),
            "local_ranks": self.local_ranks,
            "world": self.world,
            "server_steps_on": self.server_steps_on,
            "ranks": [dataclasses.asdict(r) for r in self.ranks],
        }

    @classmethod
    def from_json(cls, data: object) -> DdpGroup:
        read = _Reader("ddp group", data)
        ranks = []
        for entry in read.objects("ranks") or ():
            place = _Reader("ddp group's rank", entry)
            rank, host, device = place.integer("rank"), place.text("host"), place.integer("device")
            if rank is None or host is None or device is None:
                raise ValueError(f"ddp group's rank {entry!r:.60} lacks its rank, host or device")
            ranks.append(RankPlace(rank, host, device))
        numbers = {k: read.integer(k) for k in ("node", "nodes", "master_port", "torch_port")}
        numbers |= {k: read.integer(k) for k in ("local_ranks", "world")}
        missing = [k for k, v in numbers.items() if v is None]
        if missing:
            raise ValueError(f"ddp group lacks {', '.join(missing)}")
        return cls(
            name=read.text("name"),
            master_addr=read.text("master_addr") or "",
            hosts=read.texts("hosts") or (),
            server_steps_on=read.text("server_steps_on") or "",
            ranks=tuple(ranks),
            extra=read.left,
            **numbers,  # type: ignore[arg-type]
        )

    def this_node(self) -> dict[int, int]:
        """This node's devices by their global rank: device index -> global rank."""
        local = self.local_ranks
        return {r.device: r.rank for r in self.ranks if local and r.rank // local == self.node}

    def labels(self) -> dict[int, str]:
        """Every global rank's host and device: "n2 device 1"."""
        return {r.rank: f"{r.host} device {r.device}" for r in self.ranks}


@dataclass(frozen=True, slots=True)
class Salvage:
    """What reading a damaged store got back: its telemetry samples (rows) and the time of
    the last one, and the tables that were not read whole."""

    samples: int
    last_t_s: float | None
    incomplete_tables: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True, slots=True)
class RunMeta:
    """A run store's meta table, typed: read once by the store (``RunStore.meta``), never
    looked up by key anywhere else. An entry a run did not write reads as None (the run
    record as a record of Nones); keys this soak does not know are kept in ``extra``."""

    run: RunRecord = field(default_factory=RunRecord)
    stop: StopRecord | None = None  # None: no stop was recorded (the coordinator died)
    host: Mapping[str, Any] = field(default_factory=dict)  # hostname, os, cpu, versions
    profile: Mapping[str, Any] | None = None  # the profile the run was judged with (as_dict)
    load_start_s: float | None = None  # when the load was launched, on the run's clock
    bmc: BmcProbe | None = None  # None: no BMC was probed (a run stored before soak read one)
    ddp_group: DdpGroup | None = None  # None: not a node of a multi-node ddp group
    # The sequential stop of --until-steady (or an import's replayed one); None: none stored
    stop_decision: StopDecision | None = None
    store_version: int | None = None
    # What a salvage of a damaged store got back; None: the store was read whole. Never
    # written: the store that read the run says so.
    salvage: Salvage | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, rows: Mapping[str, Any]) -> RunMeta:
        """The meta table's entries, each decoded from JSON; ValueError naming an entry of
        the wrong type (the store reports it as damage)."""
        left = dict(rows)
        for key, kinds in (("host", (dict,)), ("profile", (dict,)), ("load_start_s", _NUMBER)):
            value = left.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, kinds)):
                raise ValueError(f"meta {key!r} is a {type(value).__name__}")
        run, stop = left.pop(RUN_KEY, None), left.pop(STOP_KEY, None)
        bmc, group = left.pop("bmc", None), left.pop("ddp_group", None)
        version = left.pop("store_version", None)
        decision = left.pop(DECISION_KEY, None)
        return cls(
            run=RunRecord() if run is None else RunRecord.from_json(run),
            stop=None if stop is None else StopRecord.from_json(stop),
            host=left.pop("host", None) or {},
            profile=left.pop("profile", None),
            load_start_s=left.pop("load_start_s", None),
            bmc=None if bmc is None else BmcProbe.from_json(bmc),
            ddp_group=None if group is None else DdpGroup.from_json(group),
            stop_decision=None if decision is None else StopDecision.from_json(decision),
            store_version=version if isinstance(version, int) else None,
            extra=left,
        )


_NUMBER = (int, float)
