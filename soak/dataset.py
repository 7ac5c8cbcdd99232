"""The run dataset: one run's records as the analysis and the report read them.

What is few is held (the meta, the devices, the units, the events, the capabilities, the
server's steps and BMC readings); what grows with the run, a device's series, is read one
device at a time (``RunData.device``) into a ``DeviceSeries``: its
telemetry columns (``Columns``), its work per part (``WorkColumns``), its ddp steps and its
readings flagged impossible. A dataset over a store (``RunData.open``) reads a device each
time it is asked and keeps nothing of it, so what the analysis and the report hold is one
device's columns, never the run's; the store is its only reader. A dataset held in memory
(``RunData.held``: the simulator's truth, a bench, a test; ``RunData.from_store``: a whole
store read at once, for the stop decision's looks) gives the same ``DeviceSeries``, and its
whole-run mappings (``telemetry``, ``work``, ...) as well.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from soak.fields import Columns
from soak.model import DeviceInfo, Event, EventKind
from soak.record import RunMeta
from soak.validity import Frozen, Implausible

WORK_COLUMNS = ("t_start_s", "t_end_s", "work", "verified", "verify_error")
NOT_HELD = (
    "a stored run is read one device at a time (RunData.device); "
    "RunData.from_store holds a whole store"
)


@dataclass(frozen=True, slots=True, eq=False)
class WorkColumns(Mapping[str, np.ndarray]):
    """Many work samples of one device and workload part as column arrays in time order:
    how the store's block write takes them and how the dataset gives them back. ``verified``
    is 1/0/NaN (None: not checked, NaN throughout); ``verify_error`` NaN where none. A
    read-only mapping of ``WORK_COLUMNS`` too, for code that goes by the columns' names."""

    device: int
    part: str
    unit: str
    t_start_s: np.ndarray
    t_end_s: np.ndarray
    work: np.ndarray
    verified: np.ndarray | None = None
    verify_error: np.ndarray | None = None

    def columns(self) -> dict[str, np.ndarray]:
        """The columns given (None left out), by name."""
        found = {name: getattr(self, name) for name in WORK_COLUMNS}
        return {name: column for name, column in found.items() if column is not None}

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in WORK_COLUMNS:
            raise KeyError(name)
        column = getattr(self, name)
        return np.broadcast_to(np.nan, self.t_end_s.shape) if column is None else column

    def __iter__(self) -> Iterator[str]:
        return iter(WORK_COLUMNS)

    def __len__(self) -> int:
        return len(WORK_COLUMNS)

    @property
    def size(self) -> int:
        """The number of samples."""
        return int(self.t_end_s.size)

    def rates(self) -> WorkRates:
        """Each sample's mid time and rate (``work_rates``)."""
        return work_rates(self)


@dataclass(frozen=True, slots=True)
class WorkRates:
    """One part's work samples as rates: each sample's mid time and its work per second
    (NaN where it took no time)."""

    t_s: np.ndarray
    rate: np.ndarray


def work_rates(w: Mapping[str, np.ndarray]) -> WorkRates:
    """Per work sample of one part: its mid time and its rate (NaN where it took no time)."""
    duration = w["t_end_s"] - w["t_start_s"]
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = np.where(duration > 0, w["work"] / duration, np.nan)
    return WorkRates((w["t_start_s"] + w["t_end_s"]) / 2, rate)


def work_of(
    device: int, parts: Mapping[str, Mapping[str, np.ndarray]], units: Mapping[str, str]
) -> dict[str, WorkColumns]:
    """A device's work as the store's ``work`` reads it (part -> column -> values), typed."""
    out = {}
    for part, columns in parts.items():
        if isinstance(columns, WorkColumns):
            out[part] = columns
            continue
        given = {name: np.asarray(columns[name]) for name in WORK_COLUMNS if name in columns}
        out[part] = WorkColumns(device, part, units.get(part, ""), **given)
    return out


@dataclass(frozen=True, slots=True)
class DeviceSeries:
    """One device's series: telemetry (NaN: not read, or read and flagged impossible), work
    per part (in the order of their first unit of work), ddp steps by column, and the
    readings flagged impossible."""

    info: DeviceInfo
    telemetry: Columns
    work: Mapping[str, WorkColumns] = field(default_factory=dict)
    sync_steps: Mapping[str, np.ndarray] = field(default_factory=dict)
    implausible: tuple[Implausible, ...] = ()

    @property
    def index(self) -> int:
        return self.info.index

    @property
    def worked(self) -> bool:
        """Whether the device completed any unit of work."""
        return any(w.size for w in self.work.values())


# -- the events' details, typed where the analysis reads them --------------------------------
# An event's details are stored as JSON (``Event.details``); these read the ones the analysis
# judges by, in one place, so that no check goes by a key of its own.


@dataclass(frozen=True, slots=True)
class FreezeEvent:
    """A frozen-telemetry event (``soak.validity``, rule 2): the still span and the values
    held, and whether what followed it was judged (an import cut at the freeze: not)."""

    from_s: float
    to_s: float
    values: tuple[tuple[str, float], ...]
    judged: bool = True

    @classmethod
    def of(cls, e: Event) -> FreezeEvent | None:
        """The freeze ``e`` records; None where it records none."""
        d = e.details
        if e.kind is not EventKind.TELEMETRY or d.get("episode") != "frozen":
            return None
        values = tuple((str(k), float(v)) for k, v in dict(d.get("values", {})).items())
        return cls(float(d["from_s"]), float(d["to_s"]), values, bool(d.get("judged", True)))

    def span(self, device: int) -> Frozen:
        return Frozen(device, self.from_s, self.to_s, self.values)


@dataclass(frozen=True, slots=True)
class WorkerEnd:
    """How a device's worker ended (its ``WORKER_OUTCOME`` event): the outcome as written
    (a ``WorkerOutcome`` value, or one this soak does not know), what it said, and where its
    load ended abnormally ("setup", "run", "stop"; None: unsaid)."""

    outcome: Any
    detail: str = ""
    phase: str | None = None

    @classmethod
    def of(cls, e: Event) -> WorkerEnd | None:
        if e.kind is not EventKind.WORKER_OUTCOME:
            return None
        d = e.details
        phase = d.get("phase")
        detail = d.get("detail", "") or ""
        return cls(d.get("outcome"), detail, phase if isinstance(phase, str) else None)


def xid_code(e: Event) -> int:
    """The code of an XID event; -1 where it holds none."""
    return int(e.details.get("code", -1))


def cross_device_mismatch(e: Event) -> bool:
    """Whether a failed verification is the devices' products disagreeing with each other
    (no device's own sample records it)."""
    return e.kind is EventKind.VERIFICATION_FAILED and e.details.get("check") == CROSS_DEVICE


CROSS_DEVICE = "cross_device_checksum"


class Reader(Protocol):
    """Where a dataset is read from: the run store (``soak.store.RunStore``)."""

    def meta(self) -> RunMeta: ...
    def devices(self) -> list[DeviceInfo]: ...
    def units(self) -> dict[str, str]: ...
    def events(self) -> list[Event]: ...
    def capabilities(self) -> dict[int, dict[str, str]]: ...
    def server_steps(self) -> dict[str, np.ndarray]: ...
    def server_readings(self) -> dict[str, dict[str, np.ndarray]]: ...
    def device_series(self, info: DeviceInfo, units: Mapping[str, str]) -> DeviceSeries: ...
    def telemetry_times(self, device: int) -> np.ndarray: ...


class Source(Protocol):
    """Where a dataset's device series come from: held in memory, or read when asked."""

    def series(self, info: DeviceInfo, units: Mapping[str, str]) -> DeviceSeries: ...
    def times(self, info: DeviceInfo) -> np.ndarray: ...


@dataclass(frozen=True, slots=True)
class Held:
    """Every device's series in memory, by device index."""

    telemetry: Mapping[int, Columns] = field(default_factory=dict)
    work: Mapping[int, Mapping[str, Mapping[str, np.ndarray]]] = field(default_factory=dict)
    sync_steps: Mapping[int, Mapping[str, np.ndarray]] = field(default_factory=dict)
    implausible: Mapping[int, Sequence[Implausible]] = field(default_factory=dict)

    def series(self, info: DeviceInfo, units: Mapping[str, str]) -> DeviceSeries:
        i = info.index
        return DeviceSeries(
            info,
            self.telemetry[i],
            work_of(i, self.work.get(i, {}), units),
            self.sync_steps.get(i, {}),
            tuple(self.implausible.get(i, ())),
        )

    def times(self, info: DeviceInfo) -> np.ndarray:
        return self.telemetry[info.index].t_s


@dataclass(frozen=True, slots=True)
class _Stored:
    """A device's series read from the store each time it is asked, never kept."""

    reader: Reader

    def series(self, info: DeviceInfo, units: Mapping[str, str]) -> DeviceSeries:
        return self.reader.device_series(info, units)

    def times(self, info: DeviceInfo) -> np.ndarray:
        return self.reader.telemetry_times(info.index)


@dataclass(frozen=True, slots=True)
class RunData:
    """One run's records: the run-level ones held, each device's series given one device at
    a time by ``device`` (read from the store, or held). A caller that walks the devices
    keeps no device's series past its turn (a loop variable holds the last one while the
    next is read: call ``device`` inside the step that uses it)."""

    meta: RunMeta
    devices: list[DeviceInfo]
    units: dict[str, str]  # part -> unit of work
    events: list[Event]
    source: Source
    capabilities: dict[int, dict[str, str]] = field(default_factory=dict)
    server_steps: dict[str, np.ndarray] = field(default_factory=dict)
    # the BMC's server-level series (inlet, chassis temperatures): name -> t_s, value
    server_readings: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)

    @classmethod
    def held(
        cls,
        meta: RunMeta,
        devices: list[DeviceInfo],
        telemetry: Mapping[int, Columns | Mapping[str, np.ndarray]],
        work: Mapping[int, Mapping[str, Mapping[str, np.ndarray]]],
        units: dict[str, str],
        events: list[Event],
        capabilities: dict[int, dict[str, str]] | None = None,
        sync_steps: Mapping[int, Mapping[str, np.ndarray]] | None = None,
        server_steps: dict[str, np.ndarray] | None = None,
        implausible: Mapping[int, Sequence[Implausible]] | None = None,
        server_readings: dict[str, dict[str, np.ndarray]] | None = None,
    ) -> RunData:
        """A run's records held in memory (a mapping of a device's columns is viewed as
        ``Columns``): what the simulator's truth, a bench or a test builds."""
        viewed = {i: t if isinstance(t, Columns) else Columns(t) for i, t in telemetry.items()}
        return cls(
            meta,
            devices,
            units,
            events,
            Held(viewed, dict(work), dict(sync_steps or {}), dict(implausible or {})),
            capabilities or {},
            server_steps or {},
            server_readings or {},
        )

    @classmethod
    def open(cls, reader: Reader) -> RunData:
        """A dataset over an open store: the run-level records read now, each device's series
        read from the store when asked (the store must stay open while it is read)."""
        return cls(
            reader.meta(),
            reader.devices(),
            reader.units(),
            reader.events(),
            _Stored(reader),
            reader.capabilities(),
            reader.server_steps(),
            reader.server_readings(),
        )

    @classmethod
    def from_store(cls, reader: Reader) -> RunData:
        """Every record of a store read now and held: the stop decision's looks, which cut
        the whole run at many times. Memory: every device's series."""
        data = cls.open(reader)
        each = [data.device(d.index) for d in data.devices]  # every device at once
        return data.with_held(
            telemetry={s.index: s.telemetry for s in each},
            work={s.index: dict(s.work) for s in each},
            sync_steps={s.index: s.sync_steps for s in each},
            implausible={s.index: list(s.implausible) for s in each},
        )

    def device(self, index: int) -> DeviceSeries:
        """One device's series (read from the store, for a stored run)."""
        info = next((d for d in self.devices if d.index == index), None)
        if info is None:
            raise KeyError(f"no device {index} in the run")
        return self.source.series(info, self.units)

    def times(self, index: int) -> np.ndarray:
        """One device's telemetry times alone (for a stored run, its one column read): what
        sets a figure's time axis before any device's series is read."""
        info = next((d for d in self.devices if d.index == index), None)
        if info is None:
            raise KeyError(f"no device {index} in the run")
        return self.source.times(info)

    # -- whole-run mappings, of a dataset held in memory only ------------------------------

    @property
    def is_held(self) -> bool:
        return isinstance(self.source, Held)

    def _held(self) -> Held:
        if not isinstance(self.source, Held):
            raise TypeError(NOT_HELD)
        return self.source

    @property
    def telemetry(self) -> Mapping[int, Columns]:
        """Every device's telemetry (held data only)."""
        return self._held().telemetry

    @property
    def work(self) -> Mapping[int, Mapping[str, Mapping[str, np.ndarray]]]:
        """Every device's work, part -> columns (held data only)."""
        return self._held().work

    @property
    def sync_steps(self) -> Mapping[int, Mapping[str, np.ndarray]]:
        """Every device's ddp steps (held data only)."""
        return self._held().sync_steps

    @property
    def implausible(self) -> Mapping[int, Sequence[Implausible]]:
        """Every device's readings flagged impossible (held data only)."""
        return self._held().implausible

    def with_held(self, **changes: Any) -> RunData:
        """This run with the held series named replaced (``telemetry``, ``work``,
        ``sync_steps``, ``implausible``); a stored run becomes a held one where all four are
        given."""
        if isinstance(self.source, Held):
            held = dataclasses.replace(self.source, **changes)
        else:
            held = Held(**changes)
        return dataclasses.replace(self, source=held)

    def up_to(self, t_s: float) -> RunData:
        """The run's records up to ``t_s`` (a held dataset): what a look at ``t_s`` sees."""

        def cut(columns: Mapping[str, np.ndarray], key: str) -> dict[str, np.ndarray]:
            if key not in columns:
                return dict(columns)
            keep = np.asarray(columns[key]) <= t_s
            return {name: np.asarray(values)[keep] for name, values in columns.items()}

        held = self._held()
        cut_held = Held(
            {i: tele.replace(**cut(tele, "t_s")) for i, tele in held.telemetry.items()},
            {i: {p: cut(w, "t_end_s") for p, w in parts.items()} for i, parts in held.work.items()},
            {i: cut(s, "t_end_s") for i, s in held.sync_steps.items()},
            {i: [x for x in f if x.t_s <= t_s] for i, f in held.implausible.items()},
        )
        return dataclasses.replace(
            self,
            source=cut_held,
            events=[e for e in self.events if e.t_s <= t_s],
            server_steps=cut(self.server_steps, "t_end_s"),
            server_readings={k: cut(v, "t_s") for k, v in self.server_readings.items()},
        )
