"""The run's configuration: everything ``soak run`` was asked to do (``RunConfig``), checked
when it is built. What a run is judged by, its acceptance profile, is ``soak.profile``."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from soak.bmc import BmcOptions
from soak.devices.base import WORKLOAD_NAMES
from soak.errors import ConfigError
from soak.nodegroup import NodeGroup
from soak.profile import Profile

SIM_ACROSS_NODES = (
    "--across-nodes: not with --backend sim (the simulated ddp runs in one process and cannot "
    "span nodes)"
)
MIN_COLD_MEASURED_S = 15.0  # the least of the cold window whose rate is worth comparing
# The fields a positive number bounds, by the option that sets them.
POSITIVE = {
    "interval_s": "--interval",
    "heartbeat_timeout_s": "--heartbeat-timeout",
    "ranks": "--ranks",
    "sim_gpus": "--sim-gpus",
    "max_s": "--max-minutes",
}


@dataclass(frozen=True, slots=True)
class RunConfig:
    """Everything ``soak run`` was asked to do. Built, it is a run that can start: every rule
    between its values is checked here, whoever builds it (the command line, the fleet's batch
    script, a bench, a test), and a broken one is a one-line ``ConfigError`` naming the
    option that sets it."""

    backend: str = "auto"
    workload: str = "mix"
    duration_s: float = 7200.0
    until_steady: bool = False
    # --until-steady: the load stops here whatever is still undecided (--max-minutes)
    max_s: float = 3000.0
    interval_s: float = 1.0
    baseline_s: float = 10.0
    devices: tuple[int, ...] | None = None
    profile: Profile = field(default_factory=Profile)
    out: Path = Path("reports")
    seed: int | None = None
    tags: dict[str, str] = field(default_factory=dict)
    sim_gpus: int = 8
    sim_sku: str = "h100-sxm"
    sim_faults: tuple[str, ...] = ()
    sim_sensors: str = "real"  # the sim's sensors: "real" (default) or "ideal" (tests)
    workload_options: dict[str, Any] = field(default_factory=dict)
    heartbeat_timeout_s: float = 120.0
    ranks: int = 1  # ddp on the CPU backend: rank processes sharing the CPU
    command: str = ""
    # the BMC to read the inlet from; no host: the simulator's own BMC on the sim backend,
    # else in-band IPMI where the server has it
    bmc: BmcOptions = field(default_factory=BmcOptions)
    # this node's place in a ddp group across nodes (``soak.nodegroup.from_env``); None: the
    # run is a group of its own
    node_group: NodeGroup | None = None

    def __post_init__(self) -> None:
        # The backend's name and the sim's SKU, size and faults are checked where they are
        # used (soak.devices.open_backend, SimServer), before anything is created.
        if self.workload not in WORKLOAD_NAMES:
            raise ConfigError(
                f"--workload: unknown workload {self.workload!r} ({', '.join(WORKLOAD_NAMES)})"
            )
        for name, flag in POSITIVE.items():
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ConfigError(f"{flag}: must be > 0, got {value:g}")
        if not (math.isfinite(self.baseline_s) and self.baseline_s >= 0):
            raise ConfigError(f"--baseline: must be >= 0, got {self.baseline_s:g}")
        self._check_length()
        self._check_load()
        if self.sim_faults and self.backend != "sim":
            raise ConfigError("--sim-fault: only with --backend sim")
        if self.node_group is not None:
            if self.workload != "ddp":
                raise ConfigError(
                    f"ddp across nodes (SOAK_DDP_NODES set): --workload is {self.workload}, not ddp"
                )
            if self.backend == "sim":
                raise ConfigError(SIM_ACROSS_NODES)

    def _check_length(self) -> None:
        """Refuse a load too short to measure a cold rate (nothing could be compared)."""
        windows = self.profile.windows
        need = min(MIN_COLD_MEASURED_S, windows.cold_length_s)
        least = windows.cold_start_s + need
        if not math.isfinite(self.duration_s) or self.duration_s < least:
            raise ConfigError(
                f"--minutes {self.duration_s / 60:g}: {self.duration_s:.1f} s of load measures "
                f"nothing: the cold window starts {windows.cold_start_s:g} s into the load and a "
                f"cold rate needs {need:g} s of it; at least {least:g} s "
                f"(--minutes {math.ceil(least / 60 * 100) / 100:g})"
            )

    def _check_load(self) -> None:
        """The workload's options against the backend: the heartbeat outlasts a step, ranks
        and lock-step mix where they can run."""
        from workloads.base import WorkloadOptions

        options = self.workload_options
        if self.backend != "sim":
            step_s = options.get("step_s", WorkloadOptions().step_s)
            if isinstance(step_s, float) and self.heartbeat_timeout_s <= step_s:
                raise ConfigError(
                    f"--heartbeat-timeout: {self.heartbeat_timeout_s:g} s must exceed the "
                    f"workload's step_s of {step_s:g} s"
                )
        lock_step = self.workload == "ddp" or (self.workload == "mix" and options.get("mix_sync"))
        if self.ranks != 1 and (not lock_step or self.backend != "cpu"):
            raise ConfigError(
                "--ranks: only with --backend cpu and --workload ddp, or mix with "
                "--option mix_sync=1"
            )
        if self.backend == "sim" and options.get("mix_sync"):
            raise ConfigError("--option mix_sync: the simulator does not model lock-step mix")
