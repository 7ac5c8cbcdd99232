"""train: tokens per step, losses checked, a poisoned model caught and replaced."""

from __future__ import annotations

import functools
import math

import pytest
import torch

from tests.workloads.sizes import on_cpu
from workloads import WorkloadOptions
from workloads.train import TrainWorkload

make = functools.partial(on_cpu, TrainWorkload)


def test_step_reports_tokens_and_model_flop_per_token(tiny: WorkloadOptions) -> None:
    train = make(tiny)
    result = train.step()
    (part,) = result.parts
    assert (part.part, part.unit) == ("train", "token")
    assert part.work > 0 and part.work % (4 * 32) == 0
    assert result.verifications == ()
    info = train.describe()
    assert info["flop_per_token"] == 6 * info["params"] > 0


@pytest.mark.slow
def test_loss_falls_on_the_learnable_stream(tiny: WorkloadOptions) -> None:
    train = make(tiny, step_s=0.2)
    while train.opt_steps < 120:
        train.step()
    checks = train.verify()
    assert all(c.ok for c in checks), checks
    assert any("loss" in c.detail for c in checks)


def test_poisoned_parameter_fails_the_next_step_and_is_replaced(tiny: WorkloadOptions) -> None:
    train = make(tiny)
    with torch.no_grad():
        train.model.blocks[0].up.weight[0, 0] = float("nan")
    result = train.step()
    (check,) = result.verifications
    assert not check.ok
    assert check.mismatched == check.checked > 0
    assert "non-finite" in check.detail
    assert train.resets == 1
    assert all(torch.isfinite(p).all() for p in train.model.parameters())
    assert all(c.ok for c in train.verify())


def test_verify_catches_a_non_finite_parameter(tiny: WorkloadOptions) -> None:
    train = make(tiny)
    with torch.no_grad():
        train.model.head.weight[1, :3] = float("inf")
    params, forward = train.verify()[:2]
    assert not params.ok and params.mismatched == 3
    assert forward.ok  # checked on the re-initialised model


@pytest.mark.slow
def test_loader_workers_feed_the_model(tiny: WorkloadOptions) -> None:
    train = make(tiny, train_loader_workers=1)
    try:
        result = train.step()
        assert result.parts[0].work > 0
        assert math.isfinite(train.recent_losses[-1])
    finally:
        train.close()


class InfOnFirstCall:
    """The model, except that its first call returns one logit as +Inf: a transient fault in
    one of the two forward passes of the check."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.calls = 0

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        out = self.model(tokens)
        self.calls += 1
        if self.calls == 1:
            out = out.clone()
            out[0, 0, 0] = float("inf")
        return out


def test_forward_check_catches_an_inf_in_one_pass(tiny: WorkloadOptions) -> None:
    train = make(tiny)
    train.model = InfOnFirstCall(train.model)  # type: ignore[assignment]
    check = train._check_forward()
    assert not check.ok
    assert check.mismatched == 1
