"""The offline pass: the state machine replayed over a device's stored series."""

from __future__ import annotations

from dataclasses import dataclass

from soak.analysis.equilibrium.check import CheckResult, first_check_s
from soak.analysis.equilibrium.fit import Fit, fit_exponential
from soak.analysis.equilibrium.machine import Clauses, Machine, look_back_s
from soak.analysis.equilibrium.refutation import Withdrawal
from soak.analysis.equilibrium.scale import Scale, chosen_at_s
from soak.analysis.equilibrium.signals import Signals, choose_basis
from soak.profile import Windows


@dataclass(frozen=True, slots=True)
class Equilibrium:
    reached: bool
    time_s: float | None  # the date: the first counted pass that no later one overrules
    basis: str
    fit: Fit | None
    last_check: CheckResult | None
    confirmed_s: float | None = None  # when the rule had its ``eq_checks`` passes
    reason: str = ""  # why it was not reached ("" when it was)
    withdrawn: tuple[Withdrawal, ...] = ()  # earlier dates later levels refuted
    # the counted pass whose date stands (None where not reached): the signals that judged
    # the date, set it, and could not judge it (rule, line 1)
    dating: CheckResult | None = None
    # the windows the device was judged on (rule, line 16); None where the load ended
    # before they were chosen (the profile's then)
    scale: Scale | None = None

    @property
    def deciding_check(self) -> CheckResult | None:
        """The check that says which signals judged the outcome: the pass that set the
        date, or the last check made where none stands."""
        return self.dating if self.reached else self.last_check


def detect(
    load_start_s: float,
    end_s: float,
    signals: Signals,
    windows: Windows,
    clauses: Clauses | None = None,
) -> Equilibrium:
    """The same checks the online detector makes, replayed over stored series; ``clauses``:
    the rule's clauses (None: all on; a bench or a test switches one off to measure it)."""
    machine = Machine(windows, load_start_s, clauses)
    if end_s >= chosen_at_s(load_start_s, windows):
        machine.choose_scale(signals)
    # the rings reach back as far as the profile's windows do: the watch reads them
    cached = signals.cached(look_back_s(windows) + windows.eq_window_s)
    t_check = first_check_s(load_start_s, machine.windows)
    while t_check - end_s <= 1e-9 * machine.windows.eq_check_interval_s:
        machine.step(t_check, cached)
        t_check = machine.next_check_s(t_check)
    basis = machine.basis or choose_basis(signals.temp, signals.power)
    fit = None
    if basis == "temperature":
        since = signals.temp.window(load_start_s, end_s)
        fit = fit_exponential(since.t, since.y, load_start_s)
    return Equilibrium(
        machine.time_s is not None,
        machine.time_s,
        basis,
        fit,
        machine.last,
        machine.confirmed_s,
        machine.reason(end_s - load_start_s),
        tuple(machine.withdrawn),
        machine.dating,
        machine.scale,
    )
