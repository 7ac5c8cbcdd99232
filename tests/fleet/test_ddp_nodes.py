"""A ddp group across nodes (``soak fleet sbatch --workload ddp --across-nodes``): the
environment it is derived from, the rank map, the coordinators' exchange, the batch script,
the fleet report's view of the group; and (slow) two real `soak run` processes as two nodes
of one group, with and without Slurm.

The fixtures ddp-2nodes-cpu-n{1,2}.json are the summaries of one real two-node group on this
machine: two `soak run` processes with the group's variables (node 0 as SLURMD_NODENAME=n1,
node 1 as n2), the command recorded in each.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import jsonschema
import pytest

from soak.cli import main
from soak.errors import ConfigError, SoakError
from soak.fleet import collect
from soak.fleet.analyze import Settings
from soak.fleet.report import make_report
from soak.model import DeviceInfo
from soak.nodegroup import (
    Exchange,
    NodeGroup,
    from_env,
    global_rank,
    master_port,
    rank_map,
)
from soak.record import DdpGroup, RankPlace
from soak.store import RunStore
from soak.worker import WorkerPool, free_port
from testkit.fleet import FIXTURES as FLEET_FIXTURES
from tests.fleet import slurm_cluster
from workloads.base import WorkloadOptions

REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).parent / "fixtures"
SCHEMA = json.loads((REPO / "docs" / "fleet.schema.json").read_text())
GROUP = {
    "SOAK_DDP_NODE": "1",
    "SOAK_DDP_NODES": "2",
    "SOAK_DDP_MASTER_ADDR": "10.0.0.7",
    "SOAK_DDP_MASTER_PORT": "23456",
}

# ----------------------------------------------------------------------- the environment


def test_the_group_comes_from_its_four_variables():
    assert from_env({"PATH": "/bin"}) is None
    group = from_env({**GROUP, "SOAK_DDP_GROUP": "slurm-42"})
    assert group == NodeGroup(1, 2, "10.0.0.7", 23456, "slurm-42")
    assert group.torch_port == 23457


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"SOAK_DDP_MASTER_ADDR": ""}, "ddp across nodes: SOAK_DDP_MASTER_ADDR not set"),
        ({"SOAK_DDP_NODE": "2"}, "ddp across nodes: node index 2 is not in 0..1"),
        ({"SOAK_DDP_NODES": "two"}, "ddp across nodes: SOAK_DDP_NODE, SOAK_DDP_NODES and"),
        ({"SOAK_DDP_MASTER_PORT": "80"}, "SOAK_DDP_MASTER_PORT: 80 is not a port"),
        ({"SOAK_DDP_MASTER_ADDR": "a b"}, "SOAK_DDP_MASTER_ADDR: 'a b' is not an address"),
    ],
)
def test_a_group_named_in_part_or_wrongly_is_one_line(change, message):
    with pytest.raises(ConfigError) as caught:
        from_env({**GROUP, **change})
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_the_master_port_is_derived_from_the_job_id_in_its_range():
    assert master_port(0) == 20000
    assert master_port(123456) == 20000 + 123456 % 20000
    assert all(20000 <= master_port(j) <= 39999 for j in (1, 19999, 20000, 10**9 + 7))


# ----------------------------------------------------------------------- the rank map


def test_global_rank_is_node_times_local_devices_plus_position():
    ranks = rank_map([{"host": "a", "devices": [0, 1, 2]}, {"host": "b", "devices": [4, 5, 6]}])
    assert ranks.world == 6 and ranks.local == 3
    assert (
        [ranks.rank(1, p) for p in range(3)]
        == [3, 4, 5]
        == [global_rank(1, p, 3) for p in (0, 1, 2)]
    )
    assert [ranks.where(r) for r in range(6)] == [
        ("a", 0),
        ("a", 1),
        ("a", 2),
        ("b", 4),
        ("b", 5),
        ("b", 6),
    ]


def test_nodes_with_different_device_counts_fail_naming_them():
    with pytest.raises(SoakError) as caught:
        rank_map([{"host": "n1", "devices": [0, 1]}, {"host": "n2", "devices": [0]}])
    assert str(caught.value) == (
        "ddp across nodes: every node must run the same number of devices; "
        "devices per node: node 0 (n1) 2, node 1 (n2) 1"
    )


def _cpu(index: int) -> DeviceInfo:
    return DeviceInfo(index, "cpu", "cpu", torch_device="cpu")


def test_two_nodes_pools_agree_on_one_rank_map_and_their_ranks_environment():
    """Two coordinators (as two nodes) exchange hosts and devices through a real TCP store;
    each gives its devices global ranks on the master's address and torch port."""
    port = free_port()
    pools: dict[int, WorkerPool] = {}
    errors: list[BaseException] = []

    def node(i: int, host: str, devices: list[int]) -> None:
        try:
            group = NodeGroup(i, 2, "127.0.0.1", port, "test")
            pools[i] = WorkerPool(
                [_cpu(d) for d in devices],
                "ddp",
                WorkloadOptions(),
                group=group,
                host=host,
                setup_timeout_s=20.0,
            )
        except BaseException as exc:
            errors.append(exc)

    threads = [
        threading.Thread(target=node, args=(0, "n1", [0, 1])),
        threading.Thread(target=node, args=(1, "n2", [0, 1])),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
    try:
        assert pools[0].ddp_group == dataclasses.replace(pools[1].ddp_group, node=0)
        record = pools[1].ddp_group
        assert record.hosts == ("n1", "n2") and record.world == 4
        assert record.server_steps_on == "n1" and record.name == "test"
        assert record.ranks[3] == RankPlace(rank=3, host="n2", device=1)
        assert record.this_node() == {0: 2, 1: 3}
        assert DdpGroup.from_json(record.to_json()) == record
        env = pools[1].rank_envs()
        assert [env[d]["SOAK_DDP_RANK"] for d in (0, 1)] == ["2", "3"]
        assert {env[d]["SOAK_DDP_WORLD"] for d in (0, 1)} == {"4"}
        assert {env[d]["SOAK_DDP_ADDR"] for d in (0, 1)} == {"127.0.0.1"}
        assert {env[d]["SOAK_DDP_PORT"] for d in (0, 1)} == {str(port + 1)}
        assert [pools[0].rank_envs()[d]["SOAK_DDP_RANK"] for d in (0, 1)] == ["0", "1"]
    finally:
        for pool in pools.values():
            pool.close_exchange()


@pytest.mark.slow
def test_a_node_that_never_joins_fails_the_rendezvous_naming_it():
    exchange = Exchange(NodeGroup(0, 2, "127.0.0.1", free_port()), timeout_s=0.5)
    try:
        with pytest.raises(SoakError) as caught:
            exchange.share("n1", [0])
    finally:
        exchange.close()
    assert str(caught.value).startswith(
        "ddp across nodes: node(s) 1 of 2 did not join within 0.5 s"
    )


# ----------------------------------------------------------------------- the command line


def _sbatch(out: Path, *run_args: str) -> int:
    return main(
        ["fleet", "sbatch", "--nodes", "2", "--across-nodes", "--", *run_args, "--out", str(out)]
    )


@pytest.mark.parametrize(
    ("run_args", "message"),
    [
        (
            ["--backend", "cpu", "--workload", "gemm"],
            "--across-nodes: only with --workload ddp (not gemm)",
        ),
        (["--backend", "sim", "--workload", "ddp"], "--across-nodes: not with --backend sim"),
    ],
)
def test_across_nodes_refuses_what_cannot_span_nodes(tmp_path, capsys, run_args, message):
    out = tmp_path / "o"
    assert _sbatch(out, *run_args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"soak: error: {message}") and "\n" not in err
    assert not out.exists()


def test_soak_run_refuses_a_group_it_cannot_join(tmp_path, capsys, monkeypatch):
    out = tmp_path / "o"
    for key, value in GROUP.items():
        monkeypatch.setenv(key, value)
    args = ["run", "--backend", "sim", "--workload", "ddp", "--minutes", "1", "--out", str(out)]
    assert main(args) == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .startswith("soak: error: --across-nodes: not with --backend sim")
    )
    monkeypatch.delenv("SOAK_DDP_MASTER_PORT")
    assert main(["run", "--backend", "cpu", "--workload", "ddp", "--out", str(out)]) == 2
    assert "SOAK_DDP_MASTER_PORT not set" in capsys.readouterr().err
    assert not out.exists()


def test_the_script_derives_the_rendezvous_from_slurms_environment(tmp_path, capsys):
    """The script's group lines run under bash with Slurm's variables and an `scontrol` that
    answers as Slurm does for a node whose address differs from its name."""
    out = tmp_path / "o"
    assert _sbatch(out, "--backend", "cpu", "--workload", "ddp", "--minutes", "1") == 0
    lines = (out / "soak-fleet.sbatch").read_text().splitlines()
    srun = next(line for line in lines if line.startswith("srun "))
    assert " bash -c 'SOAK_DDP_NODE=$SLURM_NODEID exec \"$@\"' soak-node " in srun
    assert srun.index("soak-node") < srun.index("-m soak run --backend cpu --workload ddp")
    start = lines.index(next(line for line in lines if line.startswith("master=")))
    end = lines.index(srun)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scontrol = bin_dir / "scontrol"
    scontrol.write_text(
        "#!/bin/bash\n"
        'if [ "$2" = hostnames ]; then printf "gpu001\\ngpu002\\n"; exit; fi\n'
        'echo "NodeName=$3 Arch=x86_64 CoresPerSocket=8"\n'
        'echo "   NodeAddr=10.1.2.3 NodeHostName=$3 Version=22.05"\n'
    )
    scontrol.chmod(0o755)
    body = "\n".join([*lines[start:end], "env | grep ^SOAK_DDP_ | sort"])
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "SLURM_JOB_NODELIST": "gpu[001-002]",
        "SLURM_JOB_ID": "123456",
        "SLURM_NNODES": "2",
    }
    done = subprocess.run(["bash", "-c", body], env=env, capture_output=True, text=True, check=True)
    exported = dict(
        line.split("=", 1) for line in done.stdout.split("\n") if line.startswith("SOAK")
    )
    assert exported == {
        "SOAK_DDP_GROUP": "slurm-123456",
        "SOAK_DDP_MASTER_ADDR": "10.1.2.3",
        "SOAK_DDP_MASTER_PORT": str(master_port(123456)),
        "SOAK_DDP_NODES": "2",
    }
    prefix = srun.split("soak-node")[0].split("--kill-on-bad-exit=0 ", 1)[1]
    node = subprocess.run(
        ["bash", "-c", f"{prefix} soak-node env"],
        env={**env, "SLURM_NODEID": "1"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert "SOAK_DDP_NODE=1" in node.stdout.splitlines()


# ----------------------------------------------------------------------- the fleet report


def _fleet(tmp_path: Path, n2=None) -> Path:
    folder = tmp_path / "fleet"
    for host in ("n1", "n2"):
        data = json.loads((FIXTURES / f"ddp-2nodes-cpu-{host}.json").read_text())
        if host == "n2" and n2 is not None:
            data = n2(data)
        if data is None:
            continue
        run = folder / host / data["run"]["started_utc"].replace(":", "").replace("-", "")
        run.mkdir(parents=True)
        (run / "summary.json").write_text(json.dumps(data))
    (folder / collect.NODE_LIST_FILE).write_text("n1\nn2\n")
    return folder


def _report(folder: Path) -> dict:
    make_report(collect.collect_summaries(folder), folder, Settings(3.0, 0.03, 5.0))
    data = json.loads((folder / "fleet.json").read_text())
    jsonschema.validate(data, SCHEMA)
    return data


def test_the_fleet_report_names_the_node_and_gpu_that_set_the_clusters_pace(tmp_path):
    folder = _fleet(tmp_path)
    [group] = _report(folder)["ddp_groups"]
    n1 = json.loads((FIXTURES / "ddp-2nodes-cpu-n1.json").read_text())
    ddp = n1["server"]["ddp"]
    assert group["hosts"] == ["n1", "n2"] and group["world"] == 2 and group["server_node"] == "n1"
    assert group["steady_step_rate"] == ddp["steady_step_rate"]
    assert group["busbw_steady_Bps"] == ddp["busbw_steady_Bps"] > 0
    # rank 1 (n2, device 0) was the straggler in most steady steps of this run
    setter = max(ddp["pace_share"], key=ddp["pace_share"].get)
    assert setter == "1"
    assert group["pace_setter"]["node"] == "n2" and group["pace_setter"]["device"] == 0
    assert group["pace_setter"]["share"] == ddp["pace_share"]["1"]
    rates = [
        json.loads((FIXTURES / f"ddp-2nodes-cpu-{h}.json").read_text())["devices"][0]["steady"][
            "throughput"
        ]["ddp"]
        for h in ("n1", "n2")
    ]
    median = (1 / rates[0] + 1 / rates[1]) / 2
    assert group["pace_setter"]["compute_excess"] == pytest.approx((1 / rates[1]) / median - 1)
    assert group["status"] == "pass" and group["failed"] == []
    assert group["pace"].startswith("n2 device 0 (rank 1) sets the cluster's pace in 51 % of")
    html = (folder / "fleet.html").read_text()
    assert "Multi-node ddp" in html and "n2 device 0 (rank 1) sets the cluster" in html


def test_a_crashed_rank_on_another_node_is_named_with_its_node(tmp_path):
    def crashed(data):
        data["devices"][0]["outcome"] = "crashed"
        return data

    [group] = _report(_fleet(tmp_path, crashed))["ddp_groups"]
    assert group["status"] == "fail"
    assert group["failed"] == ["n2 device 0 (rank 1): crashed"]


def test_a_node_that_left_no_summary_is_named_with_its_ranks(tmp_path):
    data = _report(_fleet(tmp_path, lambda _: None))
    [group] = data["ddp_groups"]
    assert data["missing"] == ["n2"]
    assert group["status"] == "warn"
    assert group["failed"] == ["n2 device 0 (rank 1): its node left no summary"]
    assert group["pace_setter"]["node"] == "n2"  # rank 0's node recorded who set the pace
    assert group["pace_setter"]["compute_excess"] is None  # n2's own figures are missing


def test_without_the_server_node_the_cluster_figures_are_not_available(tmp_path):
    folder = _fleet(tmp_path)
    shutil.rmtree(folder / "n1")
    [group] = _report(folder)["ddp_groups"]
    assert group["steady_step_rate"] is None and group["busbw_steady_Bps"] is None
    assert group["pace_setter"] is None
    assert group["pace"].startswith("pace setter: not available")


def test_runs_without_a_group_have_no_ddp_groups(tmp_path):
    folder = tmp_path / "fleet"
    run = folder / "gpu001" / "r"
    run.mkdir(parents=True)
    shutil.copy(FLEET_FIXTURES / "sim-8gpu-gemm-healthy-seed1.json", run / "summary.json")
    assert _report(folder)["ddp_groups"] == []


# ----------------------------------------------------------------------- real runs

TINY = [
    *("--option", "train_batch=2", "--option", "train_seq=16", "--option", "train_width=32"),
    *("--option", "train_layers=1", "--option", "train_heads=2", "--option", "train_vocab=64"),
    *("--option", "step_s=0.2", "--option", "ddp_allreduce_mib=0.25", "--option", "cpu_threads=1"),
]
# 12 s of load, a little over the shortest shared-cpu.toml allows (a cold rate over 8 s after
# 2 s of warm-up): fifty steps and more of 0.2 s
NODE_RUN = [
    *("--backend", "cpu", "--workload", "ddp", "--ranks", "1", "--minutes", "0.2"),
    *("--baseline", "2", "--interval", "1", "--heartbeat-timeout", "10", *TINY),
    *("--profile", str(Path(__file__).with_name("shared-cpu.toml"))),
]


def _node_env(node: int, host: str, port: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SOAK_DDP_", "SLURM"))}
    return {
        **env,
        "PYTHONPATH": str(REPO),
        "SLURMD_NODENAME": host,
        "SOAK_DDP_NODE": str(node),
        "SOAK_DDP_NODES": "2",
        "SOAK_DDP_MASTER_ADDR": "127.0.0.1",
        "SOAK_DDP_MASTER_PORT": str(port),
        "SOAK_DDP_GROUP": "two-nodes",
    }


@pytest.mark.slow
def test_two_soak_runs_as_two_nodes_form_one_group_and_the_fleet_names_its_pace(tmp_path):
    """Two `soak run` processes, as two nodes on one machine, join one gloo group: each
    stores its own rank's steps, node 0 the group's server-level steps with the straggler as
    a global rank, and the fleet report names the host and device that set the pace."""
    out = tmp_path / "acc"
    port = free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "soak", "run", *NODE_RUN, "--out", str(out)],
            env=_node_env(node, host, port),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for node, host in ((0, "n1"), (1, "n2"))
    ]
    logs = [p.communicate(timeout=240)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], logs
    stores = {host: RunStore.open(next((out / host).iterdir())) for host in ("n1", "n2")}
    try:
        for store in stores.values():
            assert store.meta().ddp_group.hosts == ("n1", "n2")
            assert len(store.sync_steps(0)["t_end_s"]) > 10  # its own rank's steps
        server = stores["n1"].server_steps()
        assert len(server["t_end_s"]) > 10 and set(server["ranks"]) == {2}
        assert set(server["straggler"]) <= {0, 1}  # global ranks of both nodes
        assert len(stores["n2"].server_steps()["t_end_s"]) == 0  # recorded once, on n1
        # every step of the group: both nodes' ranks did the same number of them
        assert len(stores["n1"].sync_steps(0)["t_end_s"]) == len(
            stores["n2"].sync_steps(0)["t_end_s"]
        )
    finally:
        for store in stores.values():
            store.close()
    (out / collect.NODE_LIST_FILE).write_text("n1\nn2\n")
    data = _report(out)
    [group] = data["ddp_groups"]
    assert group["status"] == "pass" and group["world"] == 2
    assert group["steady_step_rate"] > 0 and group["busbw_steady_Bps"] > 0
    setter = group["pace_setter"]
    assert (setter["node"], setter["device"]) == {0: ("n1", 0), 1: ("n2", 0)}[setter["rank"]]
    assert setter["share"] >= 0.5 and setter["compute_excess"] is not None
    assert group["pace"].startswith(f"{setter['node']} device 0 (rank {setter['rank']})")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("signum", "outcome"), [(signal.SIGKILL, "crashed"), (signal.SIGSTOP, "hung")]
)
def test_a_rank_lost_on_another_node_ends_every_node_and_the_fleet_names_it(
    tmp_path, signum, outcome
):
    """n2's rank is killed (SIGKILL) or stopped (SIGSTOP) mid-run: n1's rank ends `peer lost`
    within the collective timeout instead of waiting for the 10 minutes asked, both nodes
    write their report, and the fleet report names n2's device and rank."""
    out = tmp_path / "acc"
    port = free_port()
    args = [*NODE_RUN[: NODE_RUN.index("--minutes")], "--minutes", "10"]
    args += NODE_RUN[NODE_RUN.index("--minutes") + 2 :]
    procs = {
        host: subprocess.Popen(
            [sys.executable, "-m", "soak", "run", *args, "--out", str(out)],
            env=_node_env(node, host, port),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for node, host in ((0, "n1"), (1, "n2"))
    }
    worker = _wait_for_worker(procs["n2"].pid, out / "n2", timeout_s=120)
    os.kill(worker, signum)
    logs = {host: p.communicate(timeout=120)[0] for host, p in procs.items()}
    assert all(p.returncode is not None for p in procs.values()), logs
    assert not Path(f"/proc/{worker}").exists()  # the lost rank is gone too
    (out / collect.NODE_LIST_FILE).write_text("n1\nn2\n")
    data = _report(out)
    [group] = data["ddp_groups"]
    assert group["status"] == "fail"
    assert group["failed"] == [f"n2 device 0 (rank 1): {outcome}"]
    outcomes = {r["node"]: r["outcome"] for r in group["ranks"]}
    assert outcomes == {"n1": "peer lost", "n2": outcome}


def _wait_for_worker(parent: int, store_dir: Path, timeout_s: float) -> int:
    """The pid of ``parent``'s ddp worker once its node's store holds a few of its steps."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if _steps(store_dir) >= 5:
            children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
            for pid in map(int, children):
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                if b"multiprocessing.spawn" in cmdline:
                    return pid
        time.sleep(0.2)  # polling another process's progress: no event to wait on
    raise AssertionError(f"no worker with steps under {parent} within {timeout_s} s")


def _steps(folder: Path) -> int:
    """Sync steps in the store under ``folder`` (a running run's), read-only."""
    found = list(folder.glob("*/soak.sqlite")) if folder.is_dir() else []
    if not found:
        return 0
    try:
        with sqlite3.connect(f"file:{found[0]}?mode=ro", uri=True, timeout=1.0) as db:
            return int(db.execute("SELECT count(*) FROM sync_steps").fetchone()[0])
    except sqlite3.Error:
        return 0


@pytest.mark.slow
def test_real_slurm_runs_one_ddp_group_across_its_two_nodes(tmp_path, monkeypatch, capsys):
    """The --across-nodes script on a real Slurm (two node daemons on this machine, both at
    NodeAddr 127.0.0.1): the group's rendezvous comes from the job's own environment and the
    fleet report at the end of the job names the pace setter by node and device."""
    missing = slurm_cluster.missing_programs()
    if missing:
        pytest.skip(f"Slurm cannot start here: {', '.join(missing)} not installed")
    if os.geteuid() != 0:
        pytest.skip("Slurm cannot start here: its daemons run as root in this test")
    with slurm_cluster.running_cluster(tmp_path / "slurm") as cluster:
        monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
        monkeypatch.setenv("PYTHONPATH", str(REPO))
        for key in ("SOAK_DDP_NODE", "SOAK_DDP_NODES", "SOAK_DDP_MASTER_ADDR"):
            monkeypatch.delenv(key, raising=False)
        out = tmp_path / "acceptance"
        fleet = ["fleet", "sbatch", "--nodes", "2", "--across-nodes", "--submit"]
        rc = main([*fleet, "--", *NODE_RUN, "--out", str(out)])
        printed = capsys.readouterr().out.splitlines()
        assert rc == 0 and printed[-1] == str(out / "soak-fleet.sbatch")
        job = printed[0].removeprefix("submitted: job ")
        state = cluster.wait_job(job, timeout_s=300)
        log = "".join(p.read_text() for p in out.glob("slurm-*.out"))
        assert state == "COMPLETED", f"{state}: {log} {cluster.logs()}"
    port = master_port(int(job))
    assert f"ddp group of 2 nodes, master n1 at 127.0.0.1:{port}" in log
    data = json.loads((out / "fleet.json").read_text())
    jsonschema.validate(data, SCHEMA)
    [group] = data["ddp_groups"]
    assert group["name"] == f"slurm-{job}" and group["master"] == f"127.0.0.1:{port}"
    assert group["hosts"] == ["n1", "n2"] and group["status"] == "pass"
    assert group["steady_step_rate"] > 0 and group["busbw_steady_Bps"] > 0
    setter = group["pace_setter"]
    assert (setter["node"], setter["device"]) == {0: ("n1", 0), 1: ("n2", 0)}[setter["rank"]]
    assert "soak fleet: node soaks exited 0, the fleet report 0" in log


def test_fleet_report_prints_the_pace_setter_and_a_lost_rank(tmp_path, capsys):
    def crashed(data):
        data["devices"][0]["outcome"] = "crashed"
        return data

    folder = _fleet(tmp_path, crashed)
    main(["fleet", "report", str(folder), "--no-history"])
    printed = capsys.readouterr().out.splitlines()
    assert printed[-1] == str(folder / "fleet.html")
    assert printed[-3].startswith("  DDP  test: n2 device 0 (rank 1) sets the cluster's pace")
    assert printed[-2] == "  DDP  test: rank lost: n2 device 0 (rank 1): crashed"
