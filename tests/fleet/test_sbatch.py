"""soak fleet sbatch: the script it writes, its bad input, and a real Slurm running it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from soak.cli import main
from soak.fleet.sbatch import slurm_time
from tests.fleet import slurm_cluster

REPO = Path(__file__).resolve().parents[2]


def test_script_runs_one_soak_per_node_then_one_report(tmp_path, capsys):
    out = tmp_path / "acc"
    rc = main(
        [
            "fleet",
            "sbatch",
            "--nodes",
            "32",
            "--partition",
            "gpu",
            "--account",
            "ops",
            "--gpus-per-node",
            "8",
            "--",
            "--backend",
            "sim",
            "--hours",
            "2",
            "--tag",
            "site=lab",
            "--out",
            str(out),
            "--seed",
            "3",
        ]
    )
    assert rc == 0
    printed = capsys.readouterr().out.splitlines()
    script = out / "soak-fleet.sbatch"
    assert printed == [str(script)]
    text = script.read_text()
    lines = text.splitlines()
    assert lines[0] == "#!/bin/bash"
    directives = [line.removeprefix("#SBATCH ") for line in lines if line.startswith("#SBATCH")]
    assert directives == [
        "--job-name=soak-fleet",
        "--nodes=32",
        "--ntasks-per-node=1",
        "--partition=gpu",
        "--account=ops",
        "--time=02:16:00",
        "--exclusive",
        "--gpus-per-node=8",
        f"--output={out}/slurm-%j.out",
    ]  # 2 h + 10 s baseline + 15 min margin, rounded up to the minute
    srun = next(line for line in lines if line.startswith("srun "))
    assert srun.startswith("srun --ntasks-per-node=1 --kill-on-bad-exit=0 ")
    assert srun.endswith(f"-m soak run --backend sim --hours 2 --tag site=lab --seed 3 --out {out}")
    report = lines.index(next(line for line in lines if " -m soak fleet report " in line))
    assert report > lines.index(srun) and lines[report].endswith(f"fleet report {out}")
    assert 'scontrol show hostnames "$SLURM_JOB_NODELIST" > "$OUT/fleet-nodes.txt"' in lines
    assert os.access(script, os.X_OK)


@pytest.mark.parametrize(
    ("fleet_args", "run_args", "message"),
    [
        ([], ["--backend", "sim"], "fleet sbatch: give --nodes N or --nodelist LIST"),
        (["--nodes", "2"], ["--workload", "nope"], "--workload: unknown workload 'nope'"),
        (["--nodes", "0"], [], "--nodes: must be > 0, got 0"),
        (["--nodes", "2", "--partition", "a b"], [], "--partition: 'a b' must be one word"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, fleet_args, run_args, message):
    out = tmp_path / "o"
    assert main(["fleet", "sbatch", *fleet_args, "--", *run_args, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"soak: error: {message}") and "\n" not in err
    assert not out.exists()


def test_slurm_time_rounds_up_and_counts_days():
    assert slurm_time(61) == "00:02:00"
    assert slurm_time(49 * 3600) == "2-01:00:00"


@pytest.mark.slow
def test_real_slurm_runs_two_node_soaks_and_the_fleet_report(tmp_path, monkeypatch, capsys):
    missing = slurm_cluster.missing_programs()
    if missing:
        pytest.skip(f"Slurm cannot start here: {', '.join(missing)} not installed")
    if os.geteuid() != 0:
        pytest.skip("Slurm cannot start here: its daemons run as root in this test")
    with slurm_cluster.running_cluster(tmp_path / "slurm") as cluster:
        monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
        monkeypatch.setenv("PYTHONPATH", str(REPO))
        out = tmp_path / "acceptance"
        rc = main(
            [
                "fleet",
                "sbatch",
                "--nodes",
                "2",
                "--submit",
                "--",
                "--backend",
                "sim",
                "--minutes",
                "20",
                "--workload",
                "gemm",
                "--sim-gpus",
                "2",
                "--baseline",
                "0",
                "--seed",
                "5",
                "--out",
                str(out),
            ]
        )
        printed = capsys.readouterr().out.splitlines()
        assert rc == 0 and printed[-1] == str(out / "soak-fleet.sbatch")
        job = printed[0].removeprefix("submitted: job ")
        assert job.isdigit()
        state = cluster.wait_job(job, timeout_s=240)
        log = "".join(p.read_text() for p in out.glob("slurm-*.out"))
        assert state == "COMPLETED", f"{state}: {log} {cluster.logs()}"
    assert (out / "fleet-nodes.txt").read_text().split() == ["n1", "n2"]
    fleet = json.loads((out / "fleet.json").read_text())
    assert sorted(n["node"] for n in fleet["nodes"]) == ["n1", "n2"]
    assert fleet["missing"] == [] and fleet["counts"]["devices"] == 4
    for node in fleet["nodes"]:
        assert (out / node["report"]).is_file() and node["report"].startswith(node["node"] + "/")
        assert node["verdict"] == "PASS"
    assert fleet["verdict"] == "PASS"
    assert "soak fleet: node soaks exited 0, the fleet report 0" in log


def test_nodelist_shared_nodes_and_a_script_path_of_ones_own(tmp_path, capsys):
    script = tmp_path / "jobs" / "accept.sh"
    rc = main(
        [
            "fleet",
            "sbatch",
            "--nodelist",
            "gpu[001-004]",
            "--no-exclusive",
            "--script",
            str(script),
            "--margin-minutes",
            "0",
            "--history",
            str(tmp_path / "h.sqlite"),
            "--",
            "--minutes",
            "30",
            "--baseline",
            "0",
            "--out",
            str(tmp_path / "o"),
        ]
    )
    assert rc == 0 and capsys.readouterr().out.splitlines() == [str(script)]
    text = script.read_text()
    assert "#SBATCH --nodelist=gpu[001-004]\n" in text and "--nodes=" not in text
    assert "--exclusive" not in text and "#SBATCH --time=00:30:00\n" in text
    assert f"fleet report {tmp_path / 'o'} --history {tmp_path / 'h.sqlite'}\n" in text
