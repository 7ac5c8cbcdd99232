"""What the ddp workload's per-step timing costs: the same model and batch trained under
DistributedDataParallel, bare (no comm hook, no marks, no per-step all-gather) and as the
``ddp`` workload's step (a comm hook that notes the last bucket, four marks per iteration,
the all-gather of every rank's timing and the stop flag; the timed buffer all-reduce is
switched off, as it is a measurement of its own, not an overhead of timing).

One gloo rank in this process (``--device cuda`` for a GPU, NCCL). Bare and timed blocks
alternate so the machine's noise hits both alike; the figures are the median of the
rounds' paired ratios and the ratio of the fastest rounds (the least disturbed by other
processes). Prints a table and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from soak.worker import free_port
from workloads.base import WorkloadOptions
from workloads.ddp import DdpWorkload
from workloads.device import synchronize
from workloads.train import Gpt

ROUNDS = 15


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", help="torch device (default cpu)")
    parser.add_argument("--iterations", type=int, default=20, help="per block (default 20)")
    args = parser.parse_args()
    os.environ.update(
        SOAK_DDP_RANK="0",
        SOAK_DDP_WORLD="1",
        SOAK_DDP_ADDR="127.0.0.1",
        SOAK_DDP_PORT=str(free_port()),
    )
    cpu = args.device == "cpu"
    options = WorkloadOptions(
        step_s=60.0,  # calibration asks for many iterations; the bench sets its own count
        ddp_allreduce_every=10**9,
        train_batch=4 if cpu else None,
        train_seq=64 if cpu else None,
        train_width=128 if cpu else None,
        train_layers=2 if cpu else None,
        cpu_threads=1 if cpu else None,
    )
    timed = DdpWorkload(options)
    timed.setup(args.device, seed=0)
    timed.iterations = args.iterations
    timed.steps = 2  # not a replica-check step: the check is a verification, not timing
    timed.replica_every = 10**9
    device = timed.device
    torch.manual_seed(0)
    ids = [device.index] if device.type == "cuda" else None
    bare_model = DistributedDataParallel(Gpt(timed.shape).to(device), device_ids=ids)
    bare_opt = torch.optim.AdamW(bare_model.parameters(), lr=1e-4)
    shape = timed.shape

    def bare_block() -> float:
        synchronize(device)
        t0 = time.perf_counter()
        for _ in range(args.iterations):
            x = torch.randint(0, shape.vocab, (shape.batch, shape.seq), device=device)
            y = torch.randint(0, shape.vocab, (shape.batch, shape.seq), device=device)
            with torch.autocast(device.type, timed.amp_dtype, enabled=timed.autocast):
                logits = bare_model(x)
                loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), y.reshape(-1))
            loss.backward()
            bare_opt.step()
            bare_opt.zero_grad(set_to_none=True)
        synchronize(device)
        return (time.perf_counter() - t0) / args.iterations

    def timed_block() -> float:
        t0 = time.perf_counter()
        timed._step()
        return (time.perf_counter() - t0) / args.iterations

    bare_block(), timed_block()  # warm-up
    bare, with_timing = [], []
    for _ in range(ROUNDS):
        bare.append(bare_block())
        with_timing.append(timed_block())
    timed.close()
    b, w = statistics.median(bare), statistics.median(with_timing)
    paired = statistics.median(t / r for t, r in zip(with_timing, bare, strict=True))
    fastest = min(with_timing) / min(bare)
    print(f"{'variant':<22} {'median s/iteration':>20} {'fastest':>10}")
    print(f"{'bare DDP':<22} {b:>20.5f} {min(bare):>10.5f}")
    print(f"{'ddp workload (timed)':<22} {w:>20.5f} {min(with_timing):>10.5f}")
    print(f"timed / bare: median of paired rounds {paired:.4f}, fastest {fastest:.4f}")
    result = {
        "device": args.device,
        "iterations_per_block": args.iterations,
        "rounds": ROUNDS,
        "bare_s_per_iteration": b,
        "timed_s_per_iteration": w,
        "ratio_paired_median": paired,
        "ratio_fastest": fastest,
        "bare_all": bare,
        "timed_all": with_timing,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
