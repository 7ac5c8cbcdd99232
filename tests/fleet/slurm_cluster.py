"""A real Slurm on this machine for tests: munged, slurmctld and two slurmd "nodes" (n1, n2)
on 127.0.0.1 with distinct ports, configured in a temporary folder (traps and settings:
the team's notes on starting Slurm without systemd or cgroups)."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

DAEMONS = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "scontrol", "sinfo")


def missing_programs() -> list[str]:
    return [p for p in DAEMONS if shutil.which(p) is None]


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class Cluster:
    def __init__(self, root: Path, nodes: tuple[str, ...] = ("n1", "n2")) -> None:
        self.root, self.nodes = root, nodes
        self.procs: list[subprocess.Popen] = []
        self.conf = root / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}

    def write_config(self) -> None:
        r = self.root
        for sub in ("munge", "state", *(f"spool/{n}" for n in self.nodes)):
            (r / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(r, 0o755)
        os.chmod(r / "munge", 0o755)  # munged's socket folder needs o+x
        ctld, *ports = _free_ports(1 + len(self.nodes))
        lines = [
            "ClusterName=soaktest",
            "SlurmctldHost=localhost",
            f"SlurmctldPort={ctld}",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={r / 'munge' / 'munge.socket'}",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"StateSaveLocation={r / 'state'}",
            f"SlurmdSpoolDir={r / 'spool'}/%n",
            f"SlurmctldPidFile={r / 'slurmctld.pid'}",
            f"SlurmdPidFile={r / 'slurmd'}-%n.pid",
            f"SlurmctldLogFile={r / 'slurmctld.log'}",
            f"SlurmdLogFile={r / 'slurmd'}-%n.log",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "SchedulerType=sched/builtin",
            "SelectType=select/linear",
            "ReturnToService=2",
            "MpiDefault=none",
            "MailProg=/bin/true",
            "SlurmdTimeout=60",
            "MinJobAge=300",
            *(
                f"NodeName={n} NodeAddr=127.0.0.1 Port={p} CPUs=1 State=UNKNOWN"
                for n, p in zip(self.nodes, ports, strict=True)
            ),
            f"PartitionName=debug Nodes={','.join(self.nodes)} Default=YES MaxTime=INFINITE "
            "State=UP",
        ]
        self.conf.write_text("\n".join(lines) + "\n")

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = (self.root / f"{name}.stderr").open("wb")
        self.procs.append(
            subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=self.env)
        )

    def start(self, timeout_s: float = 30.0) -> None:
        r = self.root
        key = r / "munge" / "munge.key"
        subprocess.run(["mungekey", "-c", "-k", str(key)], check=True, capture_output=True)
        key.chmod(0o600)
        self._spawn(
            "munged",
            [
                "munged",
                "-F",
                "--force",
                f"--socket={r / 'munge' / 'munge.socket'}",
                f"--key-file={key}",
                f"--pid-file={r / 'munge' / 'munged.pid'}",
                f"--seed-file={r / 'munge' / 'munged.seed'}",
            ],
        )
        self._wait(lambda: (r / "munge" / "munge.socket").exists(), timeout_s, "munged")
        self._spawn("slurmctld", ["slurmctld", "-D", "-f", str(self.conf)])
        for node in self.nodes:
            self._spawn(f"slurmd-{node}", ["slurmd", "-D", "-N", node, "-f", str(self.conf)])
        self._wait(self._all_idle, timeout_s, "the nodes (idle in sinfo)")

    def _all_idle(self) -> bool:
        done = subprocess.run(
            ["sinfo", "-h", "-N", "-o", "%N %t"],
            env=self.env,
            capture_output=True,
            text=True,
            check=False,
        )
        states = dict(line.split() for line in done.stdout.splitlines() if line.strip())
        return all(states.get(n) == "idle" for n in self.nodes)

    def _wait(self, ready, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if ready():
                return
            for p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(f"{p.args[0]} exited ({p.returncode}): {self.logs()}")
            time.sleep(0.2)  # polling a real daemon: there is no event to wait on
        raise RuntimeError(f"{what} not ready in {timeout_s:g} s: {self.logs()}")

    def logs(self) -> str:
        tails = []
        for f in sorted(self.root.glob("*.stderr")) + sorted(self.root.glob("*.log")):
            text = f.read_text(errors="replace").strip().splitlines()[-5:]
            tails.append(f"[{f.name}] " + " | ".join(text))
        return " ".join(tails)

    def job_state(self, job: str) -> str | None:
        done = subprocess.run(
            ["scontrol", "show", "job", job],
            env=self.env,
            capture_output=True,
            text=True,
            check=False,
        )
        for word in done.stdout.split():
            if word.startswith("JobState="):
                return word.split("=", 1)[1]
        return None

    def wait_job(self, job: str, timeout_s: float) -> str:
        deadline, state = time.monotonic() + timeout_s, None
        while time.monotonic() < deadline:
            state = self.job_state(job)
            if state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"):
                return state
            time.sleep(0.5)
        raise RuntimeError(f"job {job} still {state} after {timeout_s:g} s: {self.logs()}")

    def stop(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
        for p in reversed(self.procs):
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


@contextlib.contextmanager
def running_cluster(root: Path) -> Iterator[Cluster]:
    cluster = Cluster(root)
    cluster.write_config()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
