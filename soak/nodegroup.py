"""A ddp group over several nodes (``soak fleet sbatch --workload ddp --across-nodes``).

The batch script derives the rendezvous from Slurm's own environment and exports it to every
node's ``soak run`` as plain variables, so that the run side is the same with or without
Slurm (the tests start two "nodes" on one machine with these variables only):

- ``SOAK_DDP_NODE``: this node's index in the job (``SLURM_NODEID``; one task per node);
- ``SOAK_DDP_NODES``: the job's node count (``SLURM_NNODES``);
- ``SOAK_DDP_MASTER_ADDR``: the address of the job's first node (``scontrol show node``'s
  ``NodeAddr``, which may differ from the node's name);
- ``SOAK_DDP_MASTER_PORT``: ``MASTER_PORT_BASE + SLURM_JOB_ID mod MASTER_PORT_SPAN``; the
  coordinators' exchange listens there, torch.distributed's store on the next port;
- ``SOAK_DDP_GROUP`` (optional): the group's name, ``slurm-<job id>`` from the script.

Before any worker starts, each node's coordinator joins a small TCP store on the master
(node 0's coordinator serves it) and posts its host name and device indices; all read every
node's post, check that every node runs the same number of devices (else the run fails at
once, naming the nodes), and derive the same rank map: global rank = node index x local
devices + local position, world = nodes x local devices. The map (every global rank's host
and device) goes into the run record under ``ddp_group``, so that the fleet report can name
the host and device of any rank.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from soak.errors import ConfigError, SoakError
from soak.record import DdpGroup, RankPlace

NODE_ENV = "SOAK_DDP_NODE"
NODES_ENV = "SOAK_DDP_NODES"
ADDR_ENV = "SOAK_DDP_MASTER_ADDR"
PORT_ENV = "SOAK_DDP_MASTER_PORT"
NAME_ENV = "SOAK_DDP_GROUP"
GROUP_ENV = (NODE_ENV, NODES_ENV, ADDR_ENV, PORT_ENV)
MASTER_PORT_BASE = 20000  # the script's port: base + job id mod span (20000-39999)
MASTER_PORT_SPAN = 20000
EXCHANGE_PREFIX = "soak-node/"


@dataclass(frozen=True)
class NodeGroup:
    """This node's place in a multi-node ddp group, from the environment."""

    node: int
    nodes: int
    master_addr: str
    master_port: int  # the coordinators' exchange; torch.distributed uses master_port + 1
    name: str | None = None

    @property
    def torch_port(self) -> int:
        return self.master_port + 1


@dataclass(frozen=True)
class RankMap:
    """Every global rank's host and device, the same on every node."""

    hosts: tuple[str, ...]  # by node index
    devices: tuple[tuple[int, ...], ...]  # by node index: its device indices, in rank order

    @property
    def local(self) -> int:
        return len(self.devices[0]) if self.devices else 0

    @property
    def world(self) -> int:
        return self.local * len(self.hosts)

    def rank(self, node: int, position: int) -> int:
        """Global rank of the ``position``-th device of node ``node``."""
        return global_rank(node, position, self.local)

    def where(self, rank: int) -> tuple[str, int]:
        """(host, device index) of a global rank."""
        node, position = divmod(rank, self.local)
        return self.hosts[node], self.devices[node][position]


def global_rank(node: int, position: int, local: int) -> int:
    return node * local + position


def master_port(job_id: int) -> int:
    """The port the batch script derives from Slurm's job id (the same formula)."""
    return MASTER_PORT_BASE + job_id % MASTER_PORT_SPAN


def from_env(env: Mapping[str, str]) -> NodeGroup | None:
    """The group the environment names, None where it names none; ConfigError (one line)
    where it names one only in part or wrongly."""
    present = [k for k in GROUP_ENV if env.get(k)]
    if not present:
        return None
    missing = [k for k in GROUP_ENV if not env.get(k)]
    if missing:
        raise ConfigError(f"ddp across nodes: {', '.join(missing)} not set (with {present[0]})")
    try:
        node, nodes, port = int(env[NODE_ENV]), int(env[NODES_ENV]), int(env[PORT_ENV])
    except ValueError:
        raise ConfigError(
            f"ddp across nodes: {NODE_ENV}, {NODES_ENV} and {PORT_ENV} must be whole numbers "
            f"(got {env[NODE_ENV]!r}, {env[NODES_ENV]!r}, {env[PORT_ENV]!r})"
        ) from None
    if nodes < 1 or not 0 <= node < nodes:
        raise ConfigError(f"ddp across nodes: node index {node} is not in 0..{nodes - 1}")
    if not 1024 <= port < 65535:
        raise ConfigError(f"{PORT_ENV}: {port} is not a port in 1024..65534")
    addr = env[ADDR_ENV].strip()
    if not addr or any(c.isspace() for c in addr):
        raise ConfigError(f"{ADDR_ENV}: {env[ADDR_ENV]!r} is not an address")
    return NodeGroup(node, nodes, addr, port, env.get(NAME_ENV) or None)


def rank_map(posts: Sequence[Mapping[str, Any]]) -> RankMap:
    """The rank map from every node's post (``{"host", "devices"}``, by node index);
    SoakError where the nodes do not run the same number of devices."""
    counts = [len(p["devices"]) for p in posts]
    if len(set(counts)) > 1:
        listed = ", ".join(
            f"node {i} ({p['host']}) {n}"
            for i, (p, n) in enumerate(zip(posts, counts, strict=True))
        )
        raise SoakError(
            f"ddp across nodes: every node must run the same number of devices; "
            f"devices per node: {listed}"
        )
    if counts and counts[0] == 0:
        raise SoakError("ddp across nodes: the nodes have no devices to run")
    return RankMap(
        tuple(str(p["host"]) for p in posts),
        tuple(tuple(int(d) for d in p["devices"]) for p in posts),
    )


def record(group: NodeGroup, ranks: RankMap) -> DdpGroup:
    """The run record's ``ddp_group``: the group this node was part of."""
    return DdpGroup(
        name=group.name,
        node=group.node,
        nodes=group.nodes,
        master_addr=group.master_addr,
        master_port=group.master_port,
        torch_port=group.torch_port,
        hosts=ranks.hosts,
        local_ranks=ranks.local,
        world=ranks.world,
        server_steps_on=ranks.hosts[0],
        ranks=tuple(RankPlace(r, *ranks.where(r)) for r in range(ranks.world)),
    )


class Exchange:
    """The coordinators' exchange before the workers start: a torch TCPStore served by node
    0's coordinator for the whole run (so that a late node can still read it)."""

    def __init__(self, group: NodeGroup, timeout_s: float) -> None:
        from torch.distributed import TCPStore

        self.group = group
        self.timeout_s = timeout_s
        try:
            self.store = TCPStore(
                group.master_addr,
                group.master_port,
                is_master=group.node == 0,
                timeout=dt.timedelta(seconds=timeout_s),
                wait_for_workers=False,
            )
        except RuntimeError as exc:
            where = f"{group.master_addr}:{group.master_port}"
            role = "serve" if group.node == 0 else "reach"
            raise SoakError(
                f"ddp across nodes: cannot {role} the rendezvous at {where}: {_line(exc)}"
            ) from exc

    def share(self, host: str, devices: Sequence[int]) -> RankMap:
        """Post this node's host and devices; wait for every node's; the rank map."""
        post = {"host": host, "devices": list(devices)}
        self.store.set(f"{EXCHANGE_PREFIX}{self.group.node}", json.dumps(post))
        keys = [f"{EXCHANGE_PREFIX}{i}" for i in range(self.group.nodes)]
        try:
            self.store.wait(keys, dt.timedelta(seconds=self.timeout_s))
        except RuntimeError as exc:
            absent = [k.removeprefix(EXCHANGE_PREFIX) for k in keys if not self.store.check([k])]
            raise SoakError(
                f"ddp across nodes: node(s) {', '.join(absent)} of {self.group.nodes} did not "
                f"join within {self.timeout_s:g} s ({_line(exc)})"
            ) from exc
        return rank_map([json.loads(self.store.get(k)) for k in keys])

    def close(self) -> None:
        self.store = None  # type: ignore[assignment]


def _line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
