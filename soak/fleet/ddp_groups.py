"""Multi-node ddp groups in a fleet report: the cluster's synchronous step rate cold and
steady, the inter-node all-reduce bus bandwidth, and the node and GPU that set the pace.

A group is every run whose summary carries the same ``run.ddp_group`` (name, master address
and port; soak.nodegroup). Its server-level figures come from the summary of the node that
recorded them (``server_steps_on``, the node of global rank 0): step rates, busbw (nccl-tests'
formula over the whole group's world) and each global rank's share of the steady steps in
which it was the straggler. The rank map names each rank's host and device. The pace setter's
compute time against the median rank's comes from every node's own summary: a ddp rank's
steady throughput counts its tokens at its own compute pace (workloads/ddp.py), so its compute
time per token is 1 / throughput, comparable across nodes. A rank that crashed, hung, or ran
on a node that left no summary is named with its host and device.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from soak.fleet.collect import Collection, Node

PART = "ddp"  # the ddp workload's part in a device's throughput
FINE = frozenset({"ok", "peer lost"})  # a rank that ended with its peers: not the cause


@dataclass(frozen=True)
class Rank:
    rank: int
    host: str
    device: int
    share: float | None  # of the steady steps in which it was the straggler
    compute_per_token_s: float | None  # steady, 1 / its own-pace throughput
    outcome: str | None  # its worker's end, None where its node left no summary
    reported: bool  # its node left a summary


@dataclass
class Group:
    """One multi-node ddp group of the fleet."""

    name: str | None
    master: str  # addr:port
    hosts: tuple[str, ...]
    world: int
    server_node: str
    server: Mapping[str, Any] | None  # server.ddp of the server node's summary
    ranks: list[Rank] = field(default_factory=list)

    @property
    def pace_setter(self) -> Rank | None:
        ranked = [r for r in self.ranks if r.share is not None]
        return max(ranked, key=lambda r: r.share or 0.0) if ranked else None

    @property
    def median_compute_s(self) -> float | None:
        values = [r.compute_per_token_s for r in self.ranks if r.compute_per_token_s]
        return statistics.median(values) if values else None

    def compute_excess(self, rank: Rank) -> float | None:
        """The rank's steady compute time per token over the median rank's, minus 1."""
        median = self.median_compute_s
        if not median or not rank.compute_per_token_s:
            return None
        return rank.compute_per_token_s / median - 1.0

    @property
    def failed(self) -> list[Rank]:
        """Ranks that ended the group: crashed, hung, failed, or on a node without summary."""
        return [r for r in self.ranks if not r.reported or (r.outcome not in FINE)]

    @property
    def status(self) -> str:
        if any(r.reported and r.outcome not in FINE for r in self.ranks):
            return "fail"
        if self.server is None or any(not r.reported for r in self.ranks):
            return "warn"
        return "pass"

    def figure(self, key: str) -> float | None:
        value = (self.server or {}).get(key)
        return float(value) if isinstance(value, int | float) else None

    def pace_message(self) -> str:
        setter = self.pace_setter
        if setter is None:
            return (
                "pace setter: not available (no server-level steps from " + self.server_node + ")"
            )
        excess = self.compute_excess(setter)
        against = (
            "its compute time against the median rank's: not available"
            if excess is None
            else f"its compute time per token is {excess * 100:+.1f} % against the median "
            f"rank's ({len(self.ranks)} ranks)"
        )
        return (
            f"{setter.host} device {setter.device} (rank {setter.rank}) sets the cluster's pace "
            f"in {(setter.share or 0) * 100:.0f} % of steady steps; {against}"
        )

    def failure_messages(self) -> list[str]:
        out = []
        for r in self.failed:
            if not r.reported:
                out.append(f"{r.host} device {r.device} (rank {r.rank}): its node left no summary")
            else:
                out.append(
                    f"{r.host} device {r.device} (rank {r.rank}): {r.outcome or 'no outcome'}"
                )
        return out


def _key(group: Mapping[str, Any]) -> tuple[Any, ...]:
    return (group.get("name"), group.get("master_addr"), group.get("master_port"))


def _device(node: Node | None, index: int) -> Mapping[str, Any] | None:
    if node is None or node.summary_data is None:
        return None
    for item in node.summary_data.get("devices") or ():
        if item.get("index") == index:
            return item
    return None


def _compute_per_token(item: Mapping[str, Any] | None) -> float | None:
    rate = ((item or {}).get("steady") or {}).get("throughput", {}).get(PART)
    if isinstance(rate, int | float) and rate > 0:
        return 1.0 / float(rate)
    return None


def find_groups(collection: Collection) -> list[Group]:
    """Every multi-node ddp group among the collection's runs, in name order."""
    members: dict[tuple[Any, ...], list[tuple[Node, Mapping[str, Any]]]] = {}
    for node in collection.nodes:
        record = ((node.summary_data or {}).get("run") or {}).get("ddp_group")
        if isinstance(record, dict) and record.get("ranks"):
            members.setdefault(_key(record), []).append((node, record))
    groups = []
    for runs in members.values():
        record = runs[0][1]
        by_host = {node.name: node for node, _ in runs}
        server_node = str(record.get("server_steps_on") or record["hosts"][0])
        server_run = by_host.get(server_node)
        server = None
        if server_run is not None and server_run.summary_data is not None:
            server = (server_run.summary_data.get("server") or {}).get("ddp")
        shares = (server or {}).get("pace_share") or {}
        group = Group(
            name=record.get("name"),
            master=f"{record.get('master_addr')}:{record.get('master_port')}",
            hosts=tuple(record.get("hosts") or ()),
            world=int(record.get("world") or len(record["ranks"])),
            server_node=server_node,
            server=server,
        )
        for entry in record["ranks"]:
            host, device, rank = str(entry["host"]), int(entry["device"]), int(entry["rank"])
            node = by_host.get(host)
            item = _device(node, device)
            share = float(shares.get(str(rank), 0.0)) if server is not None else None
            group.ranks.append(
                Rank(
                    rank=rank,
                    host=host,
                    device=device,
                    share=share,
                    compute_per_token_s=_compute_per_token(item),
                    outcome=(item or {}).get("outcome"),
                    reported=item is not None,
                )
            )
        groups.append(group)
    return sorted(groups, key=lambda g: (str(g.name), g.master))


def group_json(group: Group) -> dict[str, Any]:
    """One entry of fleet.json's ``ddp_groups`` (docs/fleet-schema.md)."""
    setter = group.pace_setter
    size = group.figure("allreduce_b")
    return {
        "name": group.name,
        "master": group.master,
        "hosts": list(group.hosts),
        "world": group.world,
        "server_node": group.server_node,
        "status": group.status,
        "step_rate_unit": "samples/s",
        "cold_step_rate": group.figure("cold_step_rate"),
        "steady_step_rate": group.figure("steady_step_rate"),
        "step_rate_loss": group.figure("step_rate_loss"),
        "allreduce_b": None if size is None else int(size),
        "busbw_cold_Bps": group.figure("busbw_cold_Bps"),
        "busbw_steady_Bps": group.figure("busbw_steady_Bps"),
        "pace_setter": None
        if setter is None
        else {
            "rank": setter.rank,
            "node": setter.host,
            "device": setter.device,
            "share": setter.share,
            "compute_excess": group.compute_excess(setter),
        },
        "pace": group.pace_message(),
        "ranks": [
            {
                "rank": r.rank,
                "node": r.host,
                "device": r.device,
                "share": r.share,
                "compute_per_token_s": r.compute_per_token_s,
                "compute_excess": group.compute_excess(r),
                "outcome": r.outcome,
                "reported": r.reported,
            }
            for r in group.ranks
        ],
        "failed": group.failure_messages(),
    }


def failed_ranks(groups: Sequence[Group]) -> list[str]:
    return [message for g in groups for message in g.failure_messages()]
