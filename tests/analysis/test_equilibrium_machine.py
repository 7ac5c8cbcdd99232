"""The equilibrium state machine walked through each transition, check by check."""

import numpy as np

from soak.analysis.equilibrium import Dated, Machine, Phase, Series, Signals, Withdrawn, detect
from soak.analysis.equilibrium.check import check_times, first_check_s
from soak.profile import Windows

W = Windows()


def _plateau_then_fall(seconds=3600.0):
    """Held 2 °C above where it settles until 900 s, then falling to it over 5 min."""
    t = np.arange(0.0, seconds, 1.0)
    fall = np.clip((t - 900) / 300, 0, 1)
    true = 36 + 32.3 * (1 - np.exp(-t / 60)) - 2.0 * (1 - np.cos(np.pi * fall)) / 2
    temp = np.round(true + np.random.default_rng(5).normal(0, 0.2, t.size))
    nan = Series(t, np.full_like(t, np.nan))
    return Signals(Series(t, temp), nan, nan)


def test_searching_dated_withdrawn_dated_again():
    signals = _plateau_then_fall()
    machine = Machine(W, 0.0)
    assert machine.phase is Phase.SEARCHING and machine.reason(60.0).startswith("load of 1.0")
    # its windows, from its τ of 60 s (rule, line 16), chosen as ``detect`` chooses them
    assert machine.choose_scale(signals).window_s == 240.0 and machine.windows.eq_window_s == 240.0
    seen: list[tuple[float, Phase, list]] = []
    idle = []
    # checks on its windows' grid while searching, on the profile's (the watch's) once dated
    t = first_check_s(0.0, machine.windows)
    while t <= 3599.0:
        idle.append((t, machine.idle(t)))
        events = machine.step(t, signals)
        seen.append((t, machine.phase, events))
        t = machine.next_check_s(t)
    changes = [(t, e) for t, _, events in seen for e in events]
    kinds = [type(e) for _, e in changes]
    assert kinds == [Dated, Withdrawn, Dated], changes
    (t_dated, first), (t_gone, gone), (t_again, again) = changes
    # dated: at the check that completed the count, a date before it, the plateau's
    assert first.confirmed_s == t_dated and first.time_s < 900 and not first.again
    assert first.basis == "temperature"
    # while dated, the machine idles until the older of the profile's windows (which the
    # watch reads) starts at the date
    watched = first.time_s + 2 * W.eq_window_s
    assert [t for t, i in idle if i and t < t_gone] == [t for t, _ in idle if t_dated < t < watched]
    # withdrawn: the date it had, found at a later check
    assert gone.withdrawal.time_s == first.time_s and gone.withdrawal.at_s == t_gone
    assert gone.withdrawal.refutations[0].kind == "stepped"
    # dated again: later than the date withdrawn, and the phase says so between
    assert again.again and again.time_s > first.time_s and t_again >= t_gone
    phases = {p for t, p, _ in seen if t_dated <= t < t_gone}
    assert phases == {Phase.DATED}
    between = [p for t, p, e in seen if t_gone <= t < t_again and not e]
    assert set(between) <= {Phase.WITHDRAWN}
    assert machine.phase is Phase.DATED and machine.reason(3600.0) == ""
    # the offline pass is this replay
    eq = detect(0.0, 3599.0, signals, W)
    assert (eq.time_s, eq.confirmed_s) == (again.time_s, again.confirmed_s)
    assert eq.withdrawn == (gone.withdrawal,)


def test_a_device_that_never_settles_stays_searching_and_says_why():
    t = np.arange(0.0, 1800.0, 1.0)
    temp = 40 + t / 60  # 1 °C a minute, the whole run
    nan = Series(t, np.full_like(t, np.nan))
    machine = Machine(W, 0.0)
    events = [
        e
        for c in check_times(0.0, 1799.0, W)
        for e in machine.step(float(c), Signals(Series(t, temp), nan, nan))
    ]
    assert events == [] and machine.phase is Phase.SEARCHING
    assert machine.passes_needed() == W.eq_checks
    assert machine.reason(1800.0).startswith("still moving at the end of the load: temperature")


def test_a_withdrawal_and_its_event_give_times_in_minutes_since_load_start():
    """The texts count from the device's load start, the origin of the report's tables: the
    same plateau loaded 30 s into the run reads the same as loaded at once."""
    from soak.runner import equilibrium_event

    shift = 30.0
    base = _plateau_then_fall()
    temp = Series(base.temp.t + shift, base.temp.y)
    nan = Series(temp.t, np.full_like(temp.t, np.nan))
    eq = detect(shift, 3599.0 + shift, Signals(temp, nan, nan), W)
    [gone] = eq.withdrawn
    date, at = (gone.time_s - shift) / 60, (gone.at_s - shift) / 60
    text = gone.describe(shift)
    assert text.startswith(f"the date at {date:.1f} min was withdrawn at {at:.1f} min: ")
    assert f"the 10 min to {at:.1f} min lie " in text
    event = equilibrium_event(gone.at_s, 0, Withdrawn(gone), shift)
    assert event.message == f"equilibrium withdrawn: {text}"
    dated = Dated(eq.time_s, eq.confirmed_s, "temperature", again=True)
    message = equilibrium_event(eq.confirmed_s, 0, dated, shift).message
    after = (eq.time_s - shift) / 60
    assert message == f"equilibrium {after:.1f} min after load start (basis temperature)"
