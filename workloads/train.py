"""train: a small GPT-style transformer trained with AdamW on synthetic tokens.

Batches come from a real host-side pipeline (a ``DataLoader`` with worker processes that
generate token sequences), so a host that cannot keep up shows as falling utilisation,
as it would for a real training job. The token stream is learnable: each token follows
from the one before through a fixed permutation, except for a share of random tokens, so
a working trainer's loss falls far below its start. Nothing is downloaded.

Checks: every step's losses must be finite; ``verify`` also requires finite parameters, the
same logits from two forward passes over a fixed batch, and, once enough steps have run,
a loss clearly below the first one. After a non-finite loss or parameter the model and
optimizer are re-initialised, so the load goes on and later checks mean something.
"""

from __future__ import annotations

import ctypes
import math
import signal
import sys
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from workloads.base import PartWork, StepResult, Verification, WorkloadOptions
from workloads.device import StepSizer, open_device, resolve_dtype, supports_bf16

NOISE = 0.1  # share of tokens drawn at random instead of from the permutation
LEARN_AFTER_STEPS = 100  # optimizer steps before the loss must have fallen
LEARN_MARGIN = 0.5  # nats the recent mean loss must be below the first losses
WARMUP_STEPS = 20  # linear learning-rate warm-up
LR = 1e-3
FORWARD_RTOL = 2e-2  # two forward passes over one batch may differ by this share of RMS
PR_SET_PDEATHSIG = 1


@dataclass(frozen=True, slots=True)
class TrainShape:
    """The model and batch: sizes that decide the work per step."""

    batch: int
    seq: int
    width: int
    layers: int
    heads: int
    vocab: int
    loader_workers: int

    @property
    def tokens_per_step(self) -> int:
        return self.batch * self.seq


def default_shape(device: torch.device, options: WorkloadOptions) -> TrainShape:
    """A ~130M-parameter model on a GPU (batch from its memory), a ~4M one on a CPU."""
    if device.type == "cuda":
        total_gib = torch.cuda.get_device_properties(device).total_memory / 2**30
        base = TrainShape(16 if total_gib >= 40 else 8, 1024, 1024, 8, 16, 32768, 2)
    else:
        base = TrainShape(8, 128, 256, 4, 4, 2048, 1)
    return TrainShape(
        batch=options.train_batch or base.batch,
        seq=options.train_seq or base.seq,
        width=options.train_width or base.width,
        layers=options.train_layers or base.layers,
        heads=options.train_heads or base.heads,
        vocab=options.train_vocab or base.vocab,
        loader_workers=(
            base.loader_workers
            if options.train_loader_workers is None
            else options.train_loader_workers
        ),
    )


def _precision(device: torch.device, options: WorkloadOptions) -> tuple[torch.dtype, bool, str]:
    """The autocast dtype, whether autocast is on, and why. A GPU trains in bf16 (fp16 before
    compute capability 8.0); a CPU takes the GEMM's dtype choice, so it trains under bf16
    autocast where its matrix unit runs bf16 natively (or bf16 or fp16 was asked) and in
    fp32 otherwise."""
    if device.type == "cuda":
        if supports_bf16(device):
            return torch.bfloat16, True, "GPU has bf16 tensor cores"
        return torch.float16, True, "GPU has no bf16 tensor cores"
    choice = resolve_dtype(options.dtype, device)
    amp = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(choice.name)
    if amp is None:
        return torch.float32, False, f"GEMM dtype {choice.name}: {choice.reason}"
    return amp, True, choice.reason


class Block(nn.Module):
    """Pre-norm transformer block: causal self-attention, then a 4x MLP."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.norm2 = nn.LayerNorm(width)
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, w = x.shape
        qkv = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, w // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, w))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class Gpt(nn.Module):
    """Token and position embeddings, a stack of blocks, a final norm and an LM head."""

    def __init__(self, shape: TrainShape) -> None:
        super().__init__()
        self.tok = nn.Embedding(shape.vocab, shape.width)
        self.pos = nn.Embedding(shape.seq, shape.width)
        self.blocks = nn.ModuleList(Block(shape.width, shape.heads) for _ in range(shape.layers))
        self.norm = nn.LayerNorm(shape.width)
        self.head = nn.Linear(shape.width, shape.vocab, bias=False)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.normal_(p, std=0.02)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.tok(tokens) + self.pos(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


class TokenStream(IterableDataset):
    """Endless batches of (input, target) token sequences from a noisy permutation chain.

    Runs in the DataLoader's worker processes; every worker draws from its own seed.
    """

    def __init__(self, shape: TrainShape, seed: int) -> None:
        super().__init__()
        self.shape = shape
        self.seed = seed

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        info = get_worker_info()
        worker = info.id if info is not None else 0
        rng = np.random.default_rng([self.seed, worker])
        perm = np.random.default_rng(self.seed).permutation(self.shape.vocab)
        while True:
            tokens = torch.from_numpy(_chain(rng, perm, self.shape))
            yield tokens[:, :-1], tokens[:, 1:]


def _chain(rng: np.random.Generator, perm: np.ndarray, shape: TrainShape) -> np.ndarray:
    """``batch`` sequences of ``seq + 1`` tokens: each the permutation of the one before,
    or, with probability NOISE, a random token."""
    b, t = shape.batch, shape.seq + 1
    random_tokens = rng.integers(0, shape.vocab, size=(t, b))
    noisy = rng.random(size=(t, b)) < NOISE
    out = np.empty((t, b), dtype=np.int64)
    out[0] = random_tokens[0]
    for i in range(1, t):
        out[i] = np.where(noisy[i], random_tokens[i], perm[out[i - 1]])
    return np.ascontiguousarray(out.T)


def _loader_worker_init(_worker_id: int) -> None:
    """DataLoader workers die with the training process (Linux) and leave Ctrl-C to it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class TrainWorkload:
    """Training steps of a GPT-style model; reports tokens ("token"). Model FLOP per token
    (6 x parameters, the standard estimate) is in ``describe()``."""

    name = "train"
    unit = "token"

    def __init__(self, options: WorkloadOptions) -> None:
        self.options = options
        self.losses: list[torch.Tensor] = []  # this step's, on the device
        self.first_losses: list[float] = []  # the first finite losses since (re)initialising
        self.recent_losses: deque[float] = deque(maxlen=10)
        self.steps_done = 0
        self.resets = 0
        self._loader: DataLoader | None = None
        self._batches: Iterator[tuple[torch.Tensor, torch.Tensor]] | None = None

    def setup(self, device: str, seed: int) -> None:
        self.device = open_device(device, self.options)
        self.seed = seed
        self.shape = default_shape(self.device, self.options)
        self.amp_dtype, self.autocast, self.amp_reason = _precision(self.device, self.options)
        self._init_model()
        self.params = sum(p.numel() for p in self.model.parameters())
        self.flop_per_token = 6.0 * self.params
        self._start_loader()
        probe_gen = torch.Generator().manual_seed(seed + 1)
        probe = torch.randint(0, self.shape.vocab, (2, self.shape.seq), generator=probe_gen)
        self.probe = probe.to(self.device)
        self.sizer = StepSizer(self.device, self.enqueue, self.options.step_s, calibrate_s=0.3)
        self._collect_losses()

    def enqueue(self, count: int) -> float:
        """Queue ``count`` optimizer steps on the current stream; their tokens."""
        assert self._batches is not None
        for _ in range(count):
            x, y = next(self._batches)
            x = x.to(self.device, non_blocking=True)
            y = y.to(self.device, non_blocking=True)
            self._set_lr()
            with torch.autocast(self.device.type, self.amp_dtype, enabled=self.autocast):
                logits = self.model(x)
                loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), y.reshape(-1))
            loss.backward()
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            self.losses.append(loss.detach().float())
            self.steps_done += 1
        return float(count * self.shape.tokens_per_step)

    def step(self) -> StepResult:
        t0, t1, tokens = self.sizer.step()
        checks = self.finish_step()
        return StepResult(t0, t1, (PartWork(self.name, tokens, self.unit),), checks)

    def finish_step(self) -> tuple[Verification, ...]:
        """Check this step's losses (one sync); a non-finite one fails and resets."""
        losses = self._collect_losses()
        bad = sum(1 for v in losses if not math.isfinite(v))
        if not bad:
            return ()
        self._reset()
        detail = f"{bad} of {len(losses)} step losses non-finite; model re-initialised"
        return (Verification(self.name, False, len(losses), bad, detail=detail),)

    def verify(self) -> list[Verification]:
        return [self._check_params(), self._check_forward(), *self._check_learning()]

    def checksum(self) -> str | None:
        return None

    def describe(self) -> dict[str, Any]:
        s = self.shape
        return {
            "workload": self.name,
            "params": self.params,
            "flop_per_token": self.flop_per_token,
            "tokens_per_iteration": s.tokens_per_step,
            "iterations_per_step": self.sizer.count,
            "batch": s.batch,
            "seq": s.seq,
            "width": s.width,
            "layers": s.layers,
            "heads": s.heads,
            "vocab": s.vocab,
            "loader_workers": s.loader_workers,
            "amp": str(self.amp_dtype).removeprefix("torch.") if self.autocast else "none",
            "amp_reason": self.amp_reason,
        }

    def close(self) -> None:
        self._batches = None
        self._loader = None

    def _init_model(self) -> None:
        torch.manual_seed(self.seed + self.resets)
        self.model = Gpt(self.shape).to(self.device)
        fused = self.device.type == "cuda"
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=LR, betas=(0.9, 0.95), weight_decay=0.1, fused=fused
        )
        self.opt_steps = 0
        self.first_losses = []
        self.recent_losses.clear()

    def _reset(self) -> None:
        self.resets += 1
        self._init_model()

    def _set_lr(self) -> None:
        self.opt_steps += 1
        lr = LR * min(1.0, self.opt_steps / WARMUP_STEPS)
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def _start_loader(self) -> None:
        workers = self.shape.loader_workers
        extra: dict[str, Any] = {}
        if workers > 0:
            extra = {
                "multiprocessing_context": "spawn",
                "persistent_workers": True,
                "prefetch_factor": 4,
                "worker_init_fn": _loader_worker_init,
            }
        self._loader = DataLoader(
            TokenStream(self.shape, self.seed),
            batch_size=None,
            num_workers=workers,
            pin_memory=self.device.type == "cuda",
            **extra,
        )
        self._batches = iter(self._loader)

    def _collect_losses(self) -> list[float]:
        if not self.losses:
            return []
        values = torch.stack(self.losses).tolist()
        self.losses.clear()
        for v in values:
            if math.isfinite(v):
                if len(self.first_losses) < 3:
                    self.first_losses.append(v)
                self.recent_losses.append(v)
        return values

    def _check_params(self) -> Verification:
        with torch.no_grad():
            params = [p.detach() for p in self.model.parameters()]
            bad = int(sum((~torch.isfinite(p)).sum() for p in params).item())
        total = sum(p.numel() for p in params)
        detail = f"{bad} non-finite parameters" if bad else ""
        if bad:
            self._reset()
            detail += "; model re-initialised"
        return Verification(self.name, bad == 0, total, bad, detail=detail)

    def _check_forward(self) -> Verification:
        """Two forward passes over one batch must agree: the device computes the same
        function twice."""
        with (
            torch.no_grad(),
            torch.autocast(self.device.type, self.amp_dtype, enabled=self.autocast),
        ):
            first = self.model(self.probe).float()
            second = self.model(self.probe).float()
        err = (first - second).abs()
        # The scale from finite logits only: an Inf would make the bound Inf, and an Inf
        # error would then pass it.
        finite = first.double().nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)
        rms = float(finite.square().mean().sqrt()) or 1.0
        bound = FORWARD_RTOL * rms
        mismatched = int((~(err <= bound)).sum())
        worst = float(torch.nan_to_num(err, nan=math.inf).max())
        ok = mismatched == 0
        return Verification(
            self.name, ok, err.numel(), mismatched, worst, worst / rms, FORWARD_RTOL
        )

    def _check_learning(self) -> list[Verification]:
        """Once LEARN_AFTER_STEPS losses are in, the last ten must average LEARN_MARGIN
        nats below the first three."""
        if self.opt_steps < LEARN_AFTER_STEPS or not self.first_losses:
            return []
        first = sum(self.first_losses) / len(self.first_losses)
        recent = sum(self.recent_losses) / len(self.recent_losses)
        ok = recent < first - LEARN_MARGIN
        detail = f"loss {recent:.3f} after {self.opt_steps} steps, first {first:.3f}"
        return [Verification(self.name, ok, 1, 0 if ok else 1, detail=detail)]
