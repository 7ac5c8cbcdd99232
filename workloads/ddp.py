"""ddp: the ``train`` model under ``DistributedDataParallel``, one process per device.

Its work samples count each rank's tokens at its own compute pace (tokens x step time /
compute time), so per-device throughput shows each device's own speed; the synchronous
rate of the server comes with every step in ``StepResult.sync``.

The ranks are joined by ``torch.distributed`` (NCCL on NVIDIA, RCCL on ROCm, gloo on CPU)
through a TCP rendezvous the coordinator sets up in the environment (``DDP_ENV``): soak
picks the address and a free port, the user sets nothing. Every collective has a timeout
(``init_process_group(timeout=...)``); a collective that fails or times out raises
``PeerLost``, so a rank whose peer died or hung ends instead of waiting forever.

Each soak step runs the same number of optimizer iterations on every rank (agreed once at
setup) and times, per iteration: the local compute (forward, backward until the last
gradient bucket is ready, optimizer) and the wait in the gradient all-reduce (from the last
bucket ready to the end of backward). After the iterations, every ``allreduce_every``
steps, an all-reduce of a fixed-size buffer is timed for its bus bandwidth (nccl-tests'
busbw = size / time x 2(n-1)/n); with one rank it is skipped. Then one small all-gather
shares every rank's timing (so each rank knows the step's straggler, the rank with the
longest compute) and the stop flag, so all ranks stop after the same step. Every
``verify_interval_s`` of steps the ranks compare parameter checksums: DDP keeps replicas
identical, and a rank that differs from the majority fails "replicas differ after step N".
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from workloads.base import PartWork, StepResult, SyncTiming, Verification, WorkloadOptions
from workloads.device import open_device, supports_bf16, synchronize
from workloads.train import LR, Gpt, default_shape

# The rendezvous the coordinator writes into each rank's environment.
DDP_ENV = ("SOAK_DDP_RANK", "SOAK_DDP_WORLD", "SOAK_DDP_ADDR", "SOAK_DDP_PORT")
TIMEOUT_ENV = "SOAK_DDP_TIMEOUT_S"  # collective timeout, seconds
BACKEND_ENV = "SOAK_DDP_BACKEND"  # the backend's default choice; --option dist_backend wins
DEFAULT_TIMEOUT_S = 30.0
DIST_BACKENDS = ("gloo", "nccl", "mpi", "ucc")
CALIBRATE_ITERATIONS = 2
PERTURBATION = 1e-3  # added to one parameter of the perturbed rank (test-only option)


def rendezvous_set() -> bool:
    """Whether the coordinator gave this process a rank to join (``DDP_ENV``)."""
    return all(k in os.environ for k in DDP_ENV)


class PeerLost(RuntimeError):
    """A collective failed or timed out: a peer rank died, hung or left."""


def dist_backend(device: torch.device, options: WorkloadOptions) -> str:
    """``--option dist_backend`` if given, else the coordinator's choice, else by device:
    NCCL (RCCL on ROCm builds of torch answers to "nccl") on a GPU, gloo on a CPU."""
    if options.dist_backend:
        return options.dist_backend
    return os.environ.get(BACKEND_ENV) or ("nccl" if device.type == "cuda" else "gloo")


def bus_bandwidth(size_b: float, seconds: float, ranks: int) -> float:
    """nccl-tests' all-reduce bus bandwidth, bytes/s: algbw x 2(n-1)/n."""
    return size_b / seconds * 2.0 * (ranks - 1) / ranks


def odd_ranks(sums: list[tuple[float, ...]]) -> tuple[frozenset[int], bool]:
    """Ranks whose checksum differs from the strict majority's, and whether there is one.
    All equal: no rank. Without a strict majority (two ranks that differ): every rank that
    is not in the largest group, and False."""
    counts = Counter(sums)
    top, count = counts.most_common(1)[0]
    odd = frozenset(r for r, s in enumerate(sums) if s != top)
    if len(counts) == 1:
        return frozenset(), True
    if count * 2 > len(sums):
        return odd, True
    return frozenset(range(len(sums))), False


class _GradClock:
    """Notes when the last local gradient of a backward was computed: a post-accumulate
    hook on the parameters used first in forward (the embeddings), whose gradients come
    last. DDP's all-reduce of the last bucket starts then; the time from there until
    backward returns is the wait for the other ranks and the link. (A Python comm hook
    would see the same moment, but costs a Python callback per bucket on every step.)"""

    def __init__(self, device: torch.device, params: Sequence[torch.Tensor]) -> None:
        self.device = device
        self.ready_s = 0.0
        self.ready_event: torch.cuda.Event | None = None
        for p in params:
            p.register_post_accumulate_grad_hook(self._mark)

    def _mark(self, _param: torch.Tensor) -> None:
        if self.device.type == "cuda":
            self.ready_event = torch.cuda.Event(enable_timing=True)
            self.ready_event.record()
        else:
            self.ready_s = time.perf_counter()


class DdpWorkload:
    """Synchronous data-parallel training steps; reports tokens ("token") of this rank and,
    in ``StepResult.sync``, the step's per-rank timing."""

    name = "ddp"
    unit = "token"

    def __init__(self, options: WorkloadOptions) -> None:
        self.options = options
        self.steps = 0  # soak steps
        self.iterations_done = 0  # optimizer steps
        self.stop_event: threading.Event | None = None
        self.agreed_stop = threading.Event()
        self.group_ready = False
        self._marks: list[tuple[Any, Any, Any, Any]] = []
        self.iteration_s = 0.0  # one iteration, as calibrated at setup

    # -- setup

    def bind_stop(self, requested: threading.Event) -> threading.Event:
        """Take the worker's stop request; return the event its loop should end on, set
        after the first step whose all-gather carried any rank's request, so that every
        rank leaves after that same step (a rank that left alone would leave the others
        waiting in their next collective)."""
        self.stop_event = requested
        self.agreed_stop = threading.Event()
        return self.agreed_stop

    def setup(self, device: str, seed: int) -> None:
        missing = [k for k in DDP_ENV if k not in os.environ]
        if missing:
            raise RuntimeError(f"ddp: no rendezvous in the environment ({', '.join(missing)})")
        self.rank = int(os.environ["SOAK_DDP_RANK"])
        self.world = int(os.environ["SOAK_DDP_WORLD"])
        self.device = open_device(device, self.options)
        self.backend = dist_backend(self.device, self.options)
        if self.backend not in DIST_BACKENDS:
            raise ValueError(f"dist_backend: {self.backend!r} is not one of {DIST_BACKENDS}")
        self.timeout_s = float(os.environ.get(TIMEOUT_ENV, DEFAULT_TIMEOUT_S))
        addr, port = os.environ["SOAK_DDP_ADDR"], os.environ["SOAK_DDP_PORT"]
        dist.init_process_group(
            self.backend,
            init_method=f"tcp://{addr}:{port}",
            rank=self.rank,
            world_size=self.world,
            timeout=dt.timedelta(seconds=self.timeout_s),
        )
        self.group_ready = True
        self.shape = default_shape(self.device, self.options)
        self.amp_dtype = torch.bfloat16 if supports_bf16(self.device) else torch.float16
        self.autocast = self.device.type == "cuda"
        torch.manual_seed(seed)  # DDP broadcasts rank 0's parameters at construction anyway
        inner = Gpt(self.shape).to(self.device)
        self.params = sum(p.numel() for p in inner.parameters())
        ids = [self.device.index] if self.device.type == "cuda" else None
        self.model = DistributedDataParallel(inner, device_ids=ids)
        self.clock = _GradClock(self.device, [inner.tok.weight, inner.pos.weight])
        fused = self.device.type == "cuda"
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=LR, betas=(0.9, 0.95), weight_decay=0.1, fused=fused
        )
        self.generator = torch.Generator(device=self.device).manual_seed(seed * 7919 + self.rank)
        mib = self.options.ddp_allreduce_mib or (256.0 if self.device.type == "cuda" else 4.0)
        self.buffer = torch.ones(int(mib * 2**20) // 4, dtype=torch.float32, device=self.device)
        self.iterations = self._calibrate()
        self.replica_every = max(1, round(self.options.verify_interval_s / self.options.step_s))

    def _calibrate(self) -> int:
        """Iterations per soak step, the same on every rank: the largest count any rank
        asks for so that a step lasts about ``step_s``."""
        for _ in range(CALIBRATE_ITERATIONS):  # warm-up: allocations, kernels
            self._iteration()
        t0 = time.perf_counter()
        for _ in range(CALIBRATE_ITERATIONS):
            self._iteration()
        synchronize(self.device)
        self.iteration_s = (time.perf_counter() - t0) / CALIBRATE_ITERATIONS
        return self.agree(max(1, round(self.options.step_s / self.iteration_s)))

    def agree(self, count: int) -> int:
        """The largest ``count`` of any rank: what every rank then does (the ranks must run
        the same number of iterations, or their gradient all-reduces would not pair)."""
        wanted = torch.tensor([count], device=self.device)
        self._collective(dist.all_reduce, wanted, op=dist.ReduceOp.MAX)
        return int(wanted.item())

    # -- steps

    def _iteration(self) -> tuple[Any, Any, Any, Any]:
        """One optimizer iteration; its marks (start, last bucket ready, synced, end) as
        host seconds on a CPU, CUDA events on a GPU."""
        b, t, v = self.shape.batch, self.shape.seq, self.shape.vocab
        x = torch.randint(0, v, (b, t), device=self.device, generator=self.generator)
        y = torch.randint(0, v, (b, t), device=self.device, generator=self.generator)
        start = self._mark()
        with torch.autocast(self.device.type, self.amp_dtype, enabled=self.autocast):
            logits = self.model(x)
            loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), y.reshape(-1))
        if self.options.ddp_slow_rank == self.rank and self.iteration_s > 0:
            # test only: a straggler, slow in its own compute before the gradient
            # all-reduce (as a slow device is), so the others wait in that all-reduce of
            # every iteration; by the calibrated iteration, not by this one, which holds
            # whatever the host's load did to it
            time.sleep(max(0.0, self.options.ddp_slowdown) * self.iteration_s)
        loss.backward()
        synced = self._mark()
        ready = self.clock.ready_event if self.device.type == "cuda" else self.clock.ready_s
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        end = self._mark()
        self.iterations_done += 1
        return start, ready, synced, end

    def _mark(self) -> Any:
        if self.device.type == "cuda":
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def _seconds(self, a: Any, b: Any) -> float:
        if self.device.type == "cuda":
            return a.elapsed_time(b) / 1000.0
        return b - a

    def step(self) -> StepResult:
        t0 = time.monotonic()
        compute, wait = self.run_iterations(self.iterations)
        t_compute = time.monotonic()
        sync, checks = self.end_step(self.iterations, compute, wait, t_compute - t0)
        t1 = time.monotonic()
        # This rank's tokens at its own compute pace (the step's time without the wait for
        # slower ranks): the per-device tables judge each device's own speed; the lock-step
        # rate of the whole server is in ``sync`` (the server row).
        tokens = float(self.iterations * self.shape.tokens_per_step)
        tokens *= (t_compute - t0) / compute if compute > 0 else 1.0
        return StepResult(t0, t1, (PartWork(self.name, tokens, self.unit),), checks, sync)

    # -- the parts of a step, which mix (--option mix_sync=1) also runs

    @property
    def tokens_per_iteration(self) -> int:
        return self.shape.tokens_per_step

    def run_iterations(self, count: int) -> tuple[float, float]:
        """``count`` iterations, finished: this rank's compute and wait over them (s)."""
        self.enqueue(count)
        with self._peer_errors():
            synchronize(self.device)
        return self.take_timing()

    def enqueue(self, count: int) -> float:
        """Queue ``count`` iterations on the current stream (run them, on a CPU); their
        tokens. ``take_timing`` reads their compute and wait once they have finished."""
        with self._peer_errors():
            self._marks.extend(self._iteration() for _ in range(count))
        return float(count * self.shape.tokens_per_step)

    def take_timing(self) -> tuple[float, float]:
        """Compute and wait (s) summed over the iterations queued since the last call."""
        compute = wait = 0.0
        for start, ready, synced, end in self._marks:
            w = max(0.0, self._seconds(ready, synced))
            wait += w
            compute += self._seconds(start, end) - w
        self._marks = []
        return compute, wait

    def end_step(
        self, iterations: int, own_s: float, wait_s: float, step_s: float
    ) -> tuple[SyncTiming, tuple[Verification, ...]]:
        """What ends every synchronous step, on every rank: the timed all-reduce, one
        all-gather of every rank's own time (the longest is the step's straggler) and stop
        flag, and the replica check when due. ``own_s``: this rank's time at work in the
        step (all but ``wait_s``); ``step_s``: the step, start to the last iteration's end."""
        self.steps += 1
        allreduce_s = self._timed_allreduce()
        stop = self.stop_event is not None and self.stop_event.is_set()
        mine = torch.tensor([own_s, wait_s, float(stop)], dtype=torch.float64)
        everyone = self._gather(mine)
        if any(row[2] for row in everyone):
            self.agreed_stop.set()  # every rank leaves after this same step
        checks = self._check_replicas() if self._replica_step() else ()
        computes = tuple(row[0] for row in everyone)
        sync = SyncTiming(
            rank=self.rank,
            ranks=self.world,
            iterations=iterations,
            samples=iterations * self.shape.batch * self.world,
            compute_s=own_s,
            wait_s=wait_s,
            step_s=step_s,
            straggler=max(range(self.world), key=computes.__getitem__),
            rank_compute_s=computes,
            allreduce_b=self.buffer.numel() * 4 if allreduce_s is not None else None,
            allreduce_s=allreduce_s,
        )
        return sync, checks

    @contextlib.contextmanager
    def _peer_errors(self) -> Iterator[None]:
        """A collective inside DDP's backward that failed: PeerLost."""
        try:
            yield
        except PeerLost:
            raise
        except RuntimeError as exc:
            if _collective_error(exc):
                raise PeerLost(f"rank {self.rank}: gradient all-reduce failed: {exc}") from exc
            raise

    def _timed_allreduce(self) -> float | None:
        """Seconds of one all-reduce of the fixed buffer, every ``allreduce_every`` steps;
        None with one rank (nothing to reduce across) and between timed steps."""
        if self.world < 2 or (self.steps - 1) % self.options.ddp_allreduce_every:
            return None
        self._collective(dist.barrier)  # start together: time the transfer, not stragglers
        synchronize(self.device)
        t0 = time.perf_counter()
        self._collective(dist.all_reduce, self.buffer)
        synchronize(self.device)
        seconds = time.perf_counter() - t0
        self.buffer.fill_(1.0)  # keep the values bounded step after step
        return seconds

    def _gather(self, row: torch.Tensor) -> list[list[float]]:
        local = row.to(self.device)
        out = [torch.empty_like(local) for _ in range(self.world)]
        self._collective(dist.all_gather, out, local)
        return [t.cpu().tolist() for t in out]

    def _collective(self, fn: Any, *args: Any, **kwargs: Any) -> None:
        try:
            fn(*args, **kwargs)
        except RuntimeError as exc:
            raise PeerLost(f"rank {self.rank}: {fn.__name__} failed: {exc}") from exc

    # -- checks

    def _replica_step(self) -> bool:
        return self.steps == 1 or self.steps % self.replica_every == 0

    def _check_replicas(self) -> tuple[Verification, ...]:
        """Every rank's parameter checksum must equal the majority's; only the rank that
        differs fails (every rank, when there is no majority)."""
        if self.options.ddp_perturb_rank == self.rank and self.steps > 1:
            with torch.no_grad():
                next(self.model.parameters()).view(-1)[0] += PERTURBATION
        sums = [tuple(row) for row in self._gather(self._checksum())]
        odd, majority = odd_ranks(sums)
        if self.rank not in odd:
            return (Verification(self.name, True, self.world, 0),)
        who = "no majority among the ranks" if not majority else "differs from the majority"
        detail = f"replicas differ after step {self.iterations_done}: rank {self.rank} {who}"
        return (Verification(self.name, False, self.world, len(odd), detail=detail),)

    def _checksum(self) -> torch.Tensor:
        """Two float64 sums over all parameters (plain and index-weighted): equal on
        identical replicas, different after any change to one value."""
        total = torch.zeros(2, dtype=torch.float64, device=self.device)
        with torch.no_grad():
            for i, p in enumerate(self.model.module.parameters()):
                flat = p.detach().double().view(-1)
                total[0] += flat.sum()
                total[1] += flat.sum() * (i + 1) + flat[: min(flat.numel(), 64)].sum()
        return total.cpu()

    def verify(self) -> list[Verification]:
        """Local checks only (no collective, as ranks verify at their own times): finite
        parameters."""
        with torch.no_grad():
            bad = int(sum((~torch.isfinite(p)).sum() for p in self.model.parameters()).item())
        detail = f"{bad} non-finite parameters" if bad else ""
        return [Verification(self.name, bad == 0, self.params, bad, detail=detail)]

    def checksum(self) -> str | None:
        return None

    def describe(self) -> dict[str, Any]:
        s = self.shape
        return {
            "workload": self.name,
            "rank": self.rank,
            "ranks": self.world,
            "dist_backend": self.backend,
            "collective_timeout_s": self.timeout_s,
            "params": self.params,
            "flop_per_token": 6.0 * self.params,
            "tokens_per_iteration": s.tokens_per_step,
            "iterations_per_step": self.iterations,
            "batch": s.batch,
            "seq": s.seq,
            "width": s.width,
            "layers": s.layers,
            "allreduce_b": self.buffer.numel() * 4 if self.world > 1 else None,
            "allreduce_skipped": "one rank: nothing to all-reduce" if self.world < 2 else None,
        }

    def close(self) -> None:
        if self.group_ready:
            self.group_ready = False
            dist.destroy_process_group()


def _collective_error(exc: BaseException) -> bool:
    """Whether an error from inside DDP came from its collective (gloo/NCCL)."""
    text = str(exc).lower()
    markers = ("gloo", "nccl", "connection", "timed out", "timeout", "peer", "collective")
    return type(exc).__name__ == "DistBackendError" or any(m in text for m in markers)
