"""Records shared by every part of soak.

Units live in field names. A value that could not be read is ``None``, never 0 or -1:
a counter that is not supported must not read as "0 errors" anywhere downstream.
Times (``t_s`` and friends) are seconds since the run's start on the run's clock.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, fields
from typing import Any


class ClockReason(enum.IntFlag, boundary=enum.KEEP):
    """Why a device's clocks are below their maximum, with NVML's bit values.

    Several bits are set at once: test with ``&``, never ``==``. Bits NVML may add later
    are kept (``boundary=KEEP``) and shown as hex.
    """

    NONE = 0
    GPU_IDLE = 0x1
    APPLICATIONS_CLOCKS_SETTING = 0x2
    SW_POWER_CAP = 0x4
    HW_SLOWDOWN = 0x8
    SYNC_BOOST = 0x10
    SW_THERMAL = 0x20
    HW_THERMAL = 0x40
    HW_POWER_BRAKE = 0x80
    DISPLAY_CLOCK_SETTING = 0x100
    BOARD_LIMIT = 0x200  # nvmlClocksThrottleReasonBoardLimit
    RELIABILITY = 0x400  # nvmlClocksThrottleReasonReliability

    @classmethod
    def known_mask(cls) -> int:
        mask = 0
        for member in cls:
            mask |= member.value
        return mask

    def names(self) -> list[str]:
        """Readable names of the set bits, unknown bits as one hex entry."""
        value = int(self)
        out = [m.name.lower() for m in type(self) if m.value and value & m.value and m.name]
        unknown = value & ~type(self).known_mask()
        if unknown:
            out.append(f"unknown:{unknown:#x}")
        return out


# Reasons that mean the hardware itself pulled the clocks down: any steady time under
# them is a failed acceptance (docs/verdict.md).
HW_REASONS = ClockReason.HW_SLOWDOWN | ClockReason.HW_THERMAL | ClockReason.HW_POWER_BRAKE
# Reasons worth an event the first time a device shows each: it is held back by heat or by
# its board. Idle, application clocks and the power cap are a loaded GPU's normal state.
NOTABLE_REASONS: int = ~int(
    ClockReason.GPU_IDLE | ClockReason.APPLICATIONS_CLOCKS_SETTING | ClockReason.SW_POWER_CAP
)


class Capability(enum.StrEnum):
    """Whether a metric can be read on a device, probed once at the start of a run."""

    SUPPORTED = "supported"
    NOT_SUPPORTED = "not supported"
    NO_PERMISSION = "no permission"
    MISSING = "function missing"  # the binding or driver lacks the call
    FALLBACK = "fallback"  # read another way, e.g. energy integrated from power


class EventKind(enum.StrEnum):
    RUN_START = "run_start"
    BASELINE_START = "baseline_start"
    LOAD_START = "load_start"
    LOAD_STOP = "load_stop"
    EQUILIBRIUM = "equilibrium"
    FAULT_INJECTED = "fault_injected"
    XID = "xid"
    ECC = "ecc"
    DEVICE_LOST = "device_lost"
    WORKER_OUTCOME = "worker_outcome"
    VERIFICATION_FAILED = "verification_failed"
    WARNING = "warning"
    TELEMETRY = "telemetry"  # readings not to be trusted: frozen, a gap, a counter reset
    FOREIGN_PROCESS = "foreign_process"  # a process not soak's appeared on a device
    CLOCK_EVENT = "clock_event"  # a device showed a notable clock-event reason the first time
    STOP = "stop"


class Verdict(enum.StrEnum):
    """A device's or a run's acceptance outcome (docs/verdict.md). A StrEnum: it is the
    string summary.json and junit.xml carry."""

    PASS = "PASS"
    FAIL = "FAIL"
    INCOMPLETE = "INCOMPLETE"  # the run did not complete: nothing failed, nothing accepted


class StopReason(enum.StrEnum):
    """Why a run's load stopped."""

    DURATION = "duration"  # the time asked for
    STEADY = "steady"  # --until-steady: every device had its steady window
    INTERRUPTED = "interrupted"  # a signal (Ctrl-C, SIGTERM)
    ERROR = "error"  # every device failed or was lost, the store failed, or soak itself


class WorkerOutcome(enum.StrEnum):
    """How a device's load ended: every ending is one member, none is silent."""

    OK = "ok"  # stopped when asked, every verification passed
    VERIFICATION_FAILED = "verification failed"
    CRASHED = "crashed"  # the process died (signal, exception, nonzero exit)
    HUNG = "hung"  # no heartbeat within the limit; killed
    DEVICE_LOST = "device lost"
    OUT_OF_MEMORY = "out of memory"
    SETUP_FAILED = "setup failed"
    COORDINATOR_LOST = "coordinator lost"
    PEER_LOST = "peer lost"  # ddp: a collective failed because another rank died or hung


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    """What a device is, read once per run."""

    index: int
    backend: str
    name: str
    uuid: str | None = None
    serial: str | None = None
    pci_bus_id: str | None = None
    vbios: str | None = None
    driver_version: str | None = None
    cuda_version: str | None = None
    memory_total_b: int | None = None
    power_limit_w: float | None = None  # enforced
    default_power_limit_w: float | None = None
    max_sm_clock_mhz: float | None = None
    max_mem_clock_mhz: float | None = None
    slowdown_temp_c: float | None = None
    shutdown_temp_c: float | None = None
    max_operating_temp_c: float | None = None
    mem_max_temp_c: float | None = None
    torch_device: str | None = None  # e.g. "cuda:0", "cpu"; None where no real load runs
    # Environment a worker process for this device starts with, e.g.
    # {"CUDA_VISIBLE_DEVICES": "GPU-<uuid>"}, so that its torch_device is this device
    # under any enumeration order.
    worker_env: dict[str, str] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        """What the report calls the device, from its backend: "CPU" on the CPU backend,
        "APU" for an AMD part that shares the host's memory (MI300A), else "GPU"."""
        if self.backend == "cpu":
            return "CPU"
        if self.backend == "amd" and "MI300A" in self.name.upper():
            return "APU"
        return "GPU"

    @property
    def clock_label(self) -> str:
        """What the report calls the clock it reads: a CPU's core clock is "clock", a GPU's
        the "SM clock" (a CPU has no streaming multiprocessor)."""
        return "clock" if self.kind == "CPU" else "SM clock"

    @property
    def label(self) -> str:
        """ "GPU 3", "CPU 0": the device's kind and index."""
        return f"{self.kind} {self.index}"


@dataclass(frozen=True, slots=True)
class Telemetry:
    """One device's readings at one tick. Counters are cumulative since the driver loaded."""

    device: int
    t_s: float
    temp_c: float | None = None
    mem_temp_c: float | None = None
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    energy_j: float | None = None
    util_pct: float | None = None
    mem_util_pct: float | None = None
    fan_pct: float | None = None
    clock_reasons: int | None = None  # ClockReason bits, unknown bits kept
    power_violation_s: float | None = None
    thermal_violation_s: float | None = None
    ecc_corrected: int | None = None
    ecc_uncorrected: int | None = None
    remap_pending: int | None = None  # 0/1 flag as NVML reports it
    remap_failure: int | None = None
    retired_pages: int | None = None
    pcie_replay: int | None = None
    # What else used the device: the share of its capacity other work took (a CPU: other
    # processes and steal time), and the compute processes on it that are not soak's.
    foreign_load_pct: float | None = None
    foreign_procs: int | None = None
    foreign_mem_mib: float | None = None


TELEMETRY_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Telemetry))
# The measured fields, i.e. everything but the key.
TELEMETRY_METRICS: tuple[str, ...] = TELEMETRY_FIELDS[2:]


@dataclass(frozen=True, slots=True)
class WorkSample:
    """Work one device finished between ``t_start_s`` and ``t_end_s`` for one workload part.

    ``verified`` is None where this sample's result was not checked, True where it was
    checked and matched, False where it did not match (``verify_error`` says by how much).
    """

    device: int
    t_start_s: float
    t_end_s: float
    part: str  # "gemm", "membw", "train", ...
    work: float
    unit: str  # "FLOP", "B", "token"
    verified: bool | None = None
    verify_error: float | None = None

    @property
    def rate(self) -> float:
        return self.work / (self.t_end_s - self.t_start_s)


@dataclass(frozen=True, slots=True)
class SyncStep:
    """One synchronous (ddp) step of one device's rank: compute and collective wait summed
    over the step's iterations, and the timed all-reduce where this step had one."""

    device: int
    t_start_s: float
    t_end_s: float
    iterations: int
    compute_s: float
    wait_s: float
    step_s: float
    allreduce_b: int | None = None
    allreduce_s: float | None = None


@dataclass(frozen=True, slots=True)
class ServerStep:
    """One synchronous step of the whole server, recorded once (from the first rank): the
    samples every rank together trained on, the step's time, and the device whose rank had
    the longest compute (the straggler, which set the pace)."""

    t_start_s: float
    t_end_s: float
    samples: float  # a simulated tick holds a fractional number of steps
    step_s: float
    straggler: int
    ranks: int

    @property
    def rate(self) -> float:
        """Samples per second of the whole server."""
        return self.samples / self.step_s


@dataclass(frozen=True, slots=True)
class Event:
    """Something that happened once: a fault, an XID, a worker's end, a state change."""

    t_s: float
    kind: EventKind
    message: str
    device: int | None = None
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ServerReading:
    """One server-level reading at one tick, read from the BMC: ``series`` names it
    (``inlet_c``, the inlet sensor chosen; ``chassis_temp_c:<sensor>``, every other
    temperature sensor), ``value`` in the series' unit, None where it could not be read."""

    t_s: float
    series: str
    value: float | None


INLET_SERIES = "inlet_c"
CHASSIS_SERIES = "chassis_temp_c:"  # + the BMC's name of the sensor
