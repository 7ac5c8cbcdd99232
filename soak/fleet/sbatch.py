"""``soak fleet sbatch``: the Slurm batch script that soaks every node of an allocation at
once (one ``soak run`` per node through ``srun``) and, after every node's soak has ended,
writes the fleet report once.

Each node files its run under ``OUT/<host>/<UTC stamp>/``; the host is Slurm's node name
(``SLURMD_NODENAME``, which ``soak run`` prefers to the machine's host name), so that two
node daemons on one machine still give two folders. The script also writes the job's node
list to ``OUT/fleet-nodes.txt``, from which the report lists nodes that left no summary.
"""

from __future__ import annotations

import datetime as dt
import math
import re
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from soak import __version__
from soak.errors import ConfigError, SoakError
from soak.fleet.collect import NODE_LIST_FILE
from soak.nodegroup import (
    ADDR_ENV,
    MASTER_PORT_BASE,
    MASTER_PORT_SPAN,
    NAME_ENV,
    NODE_ENV,
    NODES_ENV,
    PORT_ENV,
)

SCRIPT_NAME = "soak-fleet.sbatch"


@dataclass(frozen=True)
class BatchSpec:
    out: Path  # absolute: every node and the report write under it
    run_args: tuple[str, ...]  # `soak run` options, --out excluded
    duration_s: float  # the soak's load
    baseline_s: float  # its idle baseline
    nodes: int | None = None
    nodelist: str | None = None
    partition: str | None = None
    account: str | None = None
    gpus_per_node: int | None = None
    exclusive: bool = True
    margin_s: float = 900.0  # start-up, report and slack on top of the soak
    job_name: str = "soak-fleet"
    report_args: tuple[str, ...] = ()
    python: str = sys.executable
    across_nodes: bool = False  # ddp: one torch.distributed group over every node


def slurm_time(seconds: float) -> str:
    """Slurm's ``--time`` for ``seconds``, rounded up to the minute: ``D-HH:MM:SS``."""
    minutes = max(1, math.ceil(seconds / 60))
    days, minutes = divmod(minutes, 24 * 60)
    hours, minutes = divmod(minutes, 60)
    return f"{days}-{hours:02d}:{minutes:02d}:00" if days else f"{hours:02d}:{minutes:02d}:00"


def without_out(run_args: Sequence[str]) -> tuple[str, ...]:
    """``run_args`` less any ``--out DIR`` / ``--out=DIR``: the fleet sets the folder."""
    out, skip = [], False
    for arg in run_args:
        if skip:
            skip = False
        elif arg == "--out":
            skip = True
        elif not arg.startswith("--out="):
            out.append(arg)
    return tuple(out)


def render_script(spec: BatchSpec) -> str:
    q = shlex.quote
    soak = f"{q(spec.python)} -m soak"
    directives = [f"--job-name={spec.job_name}"]
    if spec.nodes is not None:
        directives.append(f"--nodes={spec.nodes}")
    if spec.nodelist:
        directives.append(f"--nodelist={spec.nodelist}")
    directives.append("--ntasks-per-node=1")
    if spec.partition:
        directives.append(f"--partition={spec.partition}")
    if spec.account:
        directives.append(f"--account={spec.account}")
    directives.append(f"--time={slurm_time(spec.duration_s + spec.baseline_s + spec.margin_s)}")
    if spec.exclusive:
        directives.append("--exclusive")
    if spec.gpus_per_node is not None:
        directives.append(f"--gpus-per-node={spec.gpus_per_node}")
    directives.append(f"--output={spec.out / 'slurm-%j.out'}")
    run = shlex.join([*spec.run_args, "--out", str(spec.out)])
    report = shlex.join(["fleet", "report", str(spec.out), *spec.report_args])
    stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return "\n".join(
        [
            "#!/bin/bash",
            f"# soak fleet: a soak per node, then one fleet report (soak {__version__}, {stamp})",
            *(f"#SBATCH {d}" for d in directives),
            "set -u",
            f"OUT={q(str(spec.out))}",
            'mkdir -p "$OUT"',
            "# The nodes this job was given: the report lists any that leave no summary.",
            f'scontrol show hostnames "$SLURM_JOB_NODELIST" > "$OUT/{NODE_LIST_FILE}"',
            *(_group_lines() if spec.across_nodes else ()),
            "# One soak per node, each into $OUT/<node>/<UTC stamp>/ (the node: $SLURMD_NODENAME).",
            "# A failed node does not stop the others: the report judges them all.",
            f"srun --ntasks-per-node=1 --kill-on-bad-exit=0 {_node_prefix(spec)}{soak} run {run}",
            "soaks=$?",
            f"{soak} {report}",
            "report=$?",
            'echo "soak fleet: node soaks exited $soaks, the fleet report $report"',
            "exit $report",
            "",
        ]
    )


def _group_lines() -> list[str]:
    """--across-nodes: the ddp group's rendezvous, from Slurm's own environment
    (soak.nodegroup reads these variables on each node)."""
    return [
        "# ddp across nodes: every node's ranks join one torch.distributed group. Master: the",
        "# job's first node, at its NodeAddr (which may differ from its name); port: derived",
        f"# from the job id, in {MASTER_PORT_BASE}-{MASTER_PORT_BASE + MASTER_PORT_SPAN - 1} "
        "(torch.distributed takes the next one).",
        'master=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        'addr=$(scontrol show node "$master" | grep -o "NodeAddr=[^ ]*" | head -n 1 | cut -d= -f2)',
        f'export {ADDR_ENV}="${{addr:-$master}}"',
        f"export {PORT_ENV}=$(( {MASTER_PORT_BASE} + SLURM_JOB_ID % {MASTER_PORT_SPAN} ))",
        f'export {NODES_ENV}="$SLURM_NNODES"',
        f'export {NAME_ENV}="slurm-$SLURM_JOB_ID"',
        f'echo "soak fleet: ddp group of $SLURM_NNODES nodes, master $master at '
        f'${ADDR_ENV}:${PORT_ENV}"',
    ]


def _node_prefix(spec: BatchSpec) -> str:
    """--across-nodes: each task sets its node index (one task per node) before soak runs."""
    if not spec.across_nodes:
        return ""
    return f"bash -c '{NODE_ENV}=$SLURM_NODEID exec \"$@\"' soak-node "


def write_script(path: Path, text: str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.chmod(0o755)
    tmp.replace(path)
    return path


def submit(path: Path, env: Mapping[str, str] | None = None) -> str:
    """``sbatch --parsable SCRIPT``; returns the job id."""
    try:
        done = subprocess.run(
            ["sbatch", "--parsable", str(path)],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=False,
        )
    except FileNotFoundError:
        raise SoakError(f"sbatch: not found; the script is written: {path}") from None
    except subprocess.TimeoutExpired:
        raise SoakError(f"sbatch: no answer in 120 s; the script is written: {path}") from None
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise SoakError(f"sbatch refused {path}: {why}")
    match = re.match(r"\s*(\d+)", done.stdout)
    if not match:
        raise SoakError(f"sbatch: no job id in its answer {done.stdout.strip()!r}")
    return match.group(1)


def check_spec(spec: BatchSpec) -> None:
    if spec.nodes is None and not spec.nodelist:
        raise ConfigError("fleet sbatch: give --nodes N or --nodelist LIST")
    for name, value in (
        ("--partition", spec.partition),
        ("--account", spec.account),
        ("--nodelist", spec.nodelist),
        ("--job-name", spec.job_name),
    ):
        if value is not None and (not value or re.search(r"\s", value)):
            raise ConfigError(f"{name}: {value!r} must be one word")
