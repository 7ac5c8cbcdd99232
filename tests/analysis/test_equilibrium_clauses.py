"""Each clause of the equilibrium rule beyond the two-window test, switched off: what it
does shows as what goes missing (the switches a bench measures a clause by), passed to
``detect`` and the online detector as a ``Clauses`` value."""

import numpy as np
import pytest

from soak.analysis.equilibrium import (
    CLAUSE_NAMES,
    Clauses,
    OnlineDetector,
    Series,
    Signals,
    Withdrawn,
    detect,
)
from soak.profile import Windows
from testkit.reference import reference_time
from testkit.traces import missing_reason, trace_dir

W = Windows()
V100 = "v100x4-gpuburn-18h-lambda"


def _temperature(true: np.ndarray, t: np.ndarray, seed: int, noise_c: float) -> Signals:
    temp = np.round(true + np.random.default_rng(seed).normal(0, noise_c, t.size))
    nan = Series(t, np.full_like(t, np.nan))
    return Signals(Series(t, temp), nan, nan)


def _plateau() -> tuple[np.ndarray, Signals]:
    """Held 2 °C above where it settles until 900 s, then falling to it over 5 min."""
    t = np.arange(0.0, 3600.0)
    fall = np.clip((t - 900) / 300, 0, 1)
    true = 36 + 32.3 * (1 - np.exp(-t / 60)) - 2.0 * (1 - np.cos(np.pi * fall)) / 2
    return t, _temperature(true, t, 5, 0.2)


def _sink() -> tuple[np.ndarray, Signals]:
    """Settled within minutes, then sinking 2.5 °C over the 20 min from 15 min on."""
    t = np.arange(0.0, 3600.0)
    true = 33 + 34 * (1 - np.exp(-t / 90)) - 2.5 * np.clip((t - 900) / 1200, 0, 1)
    return t, _temperature(true, t, 13, 0.3)


def _governed() -> tuple[np.ndarray, Signals]:
    """Temperature held at its limit; the clock swings ±4 % with a 10-min fan cycle."""
    rng = np.random.default_rng(2)
    t = np.arange(0.0, 4800.0)
    temp = np.minimum(np.round(95 - 55 * np.exp(-t / 120) + rng.normal(0, 0.2, t.size)), 85)
    level = 880 + 120 * np.exp(-t / 300)
    clock = 15 * np.round(level * (1 + 0.04 * np.sin(2 * np.pi * t / 600)) / 15)
    rate = 6e14 * clock / 1410 * (1 + rng.normal(0, 0.003, t.size))
    power = 250 * clock / 880 + rng.normal(0, 2, t.size)
    gemm = {"gemm": Series(t + 0.5, rate)}
    return t, Signals(Series(t, temp), Series(t, power), Series(t, clock), gemm)


def _detect(case, *off: str):
    t, signals = case
    return detect(0.0, float(t[-1]), signals, W, Clauses().without(*off))


def test_without_the_10_min_scale_a_clock_cycled_by_the_fans_never_settles():
    assert _detect(_governed()).reached
    off = _detect(_governed(), "long_scale")
    assert not off.reached and off.reason.startswith("still moving at the end of the load: SM")


def test_without_withdrawal_a_plateau_keeps_its_early_date():
    on, off = _detect(_plateau()), _detect(_plateau(), "withdrawal")
    assert len(on.withdrawn) == 1 and on.time_s > 900
    assert off.withdrawn == () and off.time_s < 900


def test_without_the_step_the_plateau_goes_later_by_its_10_min_levels():
    on, off = _detect(_plateau()), _detect(_plateau(), "step")
    [stepped], [moved] = on.withdrawn, off.withdrawn
    assert stepped.refutations[0].kind == "stepped" and moved.refutations[0].kind == "moved"
    assert moved.at_s > stepped.at_s


@pytest.mark.slow
@pytest.mark.skipif(trace_dir(V100) is None, reason=missing_reason(V100))
def test_without_agreement_a_v100_is_dated_on_the_rise_to_its_overshoot():
    """The V100 gpu-burn run 42, GPU 3, temperature only: 65 → 67 °C by 3.5 min, 67 °C to
    8.5 min, then 66 and 65. The pass at 12.5 min dates A₁'s centre (3.75 min: the rise and
    the peak average to B's level); the pass at 16 min finds (6, 8.5] 1.2 °C above its B."""
    path = trace_dir(V100) / "derived" / "104-171-200-42_parsed.csv"
    names = path.open().readline().strip().split(",")
    cols = (names.index("est_elapsed_s_from_gpu0"), names.index("gpu3_temp_c"))
    t, temp = np.loadtxt(path, delimiter=",", skiprows=1, usecols=cols, unpack=True)
    ref = reference_time(0.0, float(t[-1]), t, temp)
    early = t <= 2400.0
    case = (t[early], Signals(Series(t[early], temp[early])))
    # on the profile's 5-min windows, where the agreement is what keeps it off the overshoot
    on, off = _detect(case, "scale"), _detect(case, "scale", "agree")
    assert off.time_s - ref < -2 * 60  # before the contract's band: at the overshoot
    assert -2 * 60 <= on.time_s - ref <= 5 * 60
    assert on.withdrawn == off.withdrawn == ()
    # on the 4-min windows its τ sets (rule, line 16; their floor is this GPU's) it is
    # within the contract with the agreement and without it
    scaled, scaled_off = _detect(case), _detect(case, "agree")
    assert scaled.scale is not None and scaled.scale.window_s == 240.0
    assert -2 * 60 <= scaled.time_s - ref <= 5 * 60
    assert -2 * 60 <= scaled_off.time_s - ref <= 5 * 60


def test_without_replay_a_device_settled_before_its_withdrawal_is_dated_again_later():
    on, off = _detect(_sink()), _detect(_sink(), "replay")
    [gone] = on.withdrawn
    assert on.confirmed_s == gone.at_s  # the checks made again complete the count at once
    assert off.withdrawn == on.withdrawn and off.confirmed_s > on.confirmed_s


def test_the_online_detector_switches_the_same_clauses_off():
    t, signals = _plateau()
    offline = _detect((t, signals), "step")
    online = OnlineDetector(W, lag_s=0.0, clauses=Clauses().without("step"))
    online.start(0.0)
    changes = []
    for i in range(t.size):
        online.add_telemetry(t[i], signals.temp.y[i], None, None)
        changes += online.update(t[i] + 1.0)
    assert online.equilibrium_s == offline.time_s
    assert tuple(c.withdrawal for c in changes if isinstance(c, Withdrawn)) == offline.withdrawn


def test_clauses_are_all_on_unless_switched_off_and_a_wrong_name_is_refused():
    assert all(getattr(Clauses(), name) for name in CLAUSE_NAMES)
    clauses = Clauses().without("step", "agree")
    assert not clauses.step and not clauses.agree and clauses.withdrawal
    with pytest.raises(ValueError, match="no clause named floor"):
        Clauses().without("floor")  # removed: it paid on no real trace and no scenario


def test_the_benches_switch_turns_a_clause_off_only_inside_its_block():
    """``testkit.clauses.clauses_off``: what a bench turns a clause off by where the analysis
    makes its own machines; production code keeps no switch, so outside it all are on."""
    from testkit.clauses import clauses_off

    with clauses_off("step") as off:
        assert not off.step and not OnlineDetector(W)._machine.clauses.step
        t, signals = _plateau()
        assert detect(0.0, float(t[-1]), signals, W) == _detect(_plateau(), "step")
    assert OnlineDetector(W)._machine.clauses == Clauses()
