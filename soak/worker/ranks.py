"""The ranks of a synchronous load (ddp, and mix with ``mix_sync=1``): which loads join one
process group, each rank's environment (rendezvous on 127.0.0.1, or a node group's master),
and the step timings the ranks report, as the pool hands them on."""

from __future__ import annotations

import socket
from collections.abc import Sequence
from typing import Any

from soak.model import DeviceInfo, ServerStep, SyncStep
from soak.nodegroup import NodeGroup, RankMap, global_rank
from workloads.base import WorkloadOptions


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the ranks' rendezvous)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def synchronous(workload: str, options: WorkloadOptions, devices: Sequence[DeviceInfo]) -> bool:
    """Whether a load's ranks join one process group: ddp always, mix with
    ``--option mix_sync=1`` on two devices or more (workloads.mix)."""
    return workload == "ddp" or (workload == "mix" and options.mix_sync and len(devices) >= 2)


def dist_backend(device: DeviceInfo) -> str:
    """The collective library for a device: NCCL on NVIDIA, RCCL (torch's "nccl" on ROCm)
    on AMD, gloo on a CPU."""
    return "gloo" if (device.torch_device or "cpu").startswith("cpu") else "nccl"


def rank_environments(
    devices: Sequence[DeviceInfo],
    heartbeat_timeout_s: float,
    group: NodeGroup | None = None,
    ranks: RankMap | None = None,
) -> dict[int, dict[str, str]]:
    """Each device's rank environment: rank by position, one free port on 127.0.0.1,
    and a collective timeout of half the heartbeat timeout, so that the ranks waiting
    on a hung peer give up (PEER_LOST) before the pool would call them hung too.
    In a node group: rank = node x local devices + position, world = nodes x local
    devices, on the master's address and the group's torch port."""
    timeout = str(heartbeat_timeout_s / 2)
    addr, port, node, world = "127.0.0.1", str(free_port()), 0, len(devices)
    if group is not None and ranks is not None:
        addr, port = group.master_addr, str(group.torch_port)
        node, world = group.node, ranks.world
    return {
        device.index: {
            "SOAK_DDP_RANK": str(global_rank(node, position, len(devices))),
            "SOAK_DDP_WORLD": str(world),
            "SOAK_DDP_ADDR": addr,
            "SOAK_DDP_PORT": port,
            "SOAK_DDP_TIMEOUT_S": timeout,
            "SOAK_DDP_BACKEND": dist_backend(device),
        }
        for position, device in enumerate(devices)
    }


def sync_steps(
    index: int,
    rows: list[tuple[Any, ...]],
    devices: Sequence[DeviceInfo],
    group: NodeGroup | None,
) -> tuple[list[SyncStep], list[ServerStep]]:
    """A rank's reported steps as the run stores them: every rank's timing, and rank 0's
    server step with the straggler named (in a node group a global rank, which the run
    record's ddp_group maps to a host and device; on one node, a device index)."""
    steps: list[SyncStep] = []
    server: list[ServerStep] = []
    for t_start, t_end, timing in rows:
        steps.append(
            SyncStep(
                index,
                t_start,
                t_end,
                timing["iterations"],
                timing["compute_s"],
                timing["wait_s"],
                timing["step_s"],
                timing["allreduce_b"],
                timing["allreduce_s"],
            )
        )
        if timing["rank"] == 0:
            straggler = timing["straggler"]
            if group is None:
                straggler = devices[straggler].index
            server.append(
                ServerStep(
                    t_start, t_end, timing["samples"], timing["step_s"], straggler, timing["ranks"]
                )
            )
    return steps, server
