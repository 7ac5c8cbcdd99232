"""The run's own records in the store's meta table, typed: what ``soak run`` or ``soak import``
recorded at the start (``RunRecord``, meta ``"run"``) and how the load stopped
(``StopRecord``, meta ``"stop"``). Every writer and every reader goes through this module.

``to_json`` writes the layout the store has always held (docs/summary-schema.md, "The run
store's records"); ``from_json`` reads every layout written since store version 1. A key that
an older writer did not record reads as None (never 0, never False); a key this soak does not
know is kept in ``extra`` and written back, so that a newer writer's facts survive a read and
a write. A value of the wrong JSON type is a ``ValueError`` naming the key: the store reports
it as a damaged store.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from soak.model import StopReason

RUN_KEY = "run"
STOP_KEY = "stop"


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

    @classmethod
    def of(cls, meta: Mapping[str, Any]) -> RunRecord:
        """The run record of a store's meta table; every field None where none was written
        (a coordinator killed before it recorded its start)."""
        found = meta.get(RUN_KEY)
        return cls() if found is None else cls.from_json(found)


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

    @classmethod
    def of(cls, meta: Mapping[str, Any]) -> StopRecord | None:
        """The stop record of a store's meta table, or None where none was written."""
        found = meta.get(STOP_KEY)
        return None if found is None else cls.from_json(found)


def _stop_reason(text: str) -> StopReason | str:
    try:
        return StopReason(text)
    except ValueError:
        return text
