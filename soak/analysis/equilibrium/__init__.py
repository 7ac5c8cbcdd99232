"""Thermal equilibrium: one rule, used online while running and offline on the store.

The rule is stated in docs/equilibrium.md ("The rule"); the modules: ``levels`` (levels and
their noise), ``check`` (the window check and dating), ``refutation`` (how a date is
withdrawn), ``machine`` (the state machine), ``offline`` (``detect``), ``online`` (the
detector fed every tick), ``fit`` (the forecast).
"""

from soak.analysis.equilibrium.check import CheckResult, Drift, check_window, drift
from soak.analysis.equilibrium.fit import Fit, fit_exponential
from soak.analysis.equilibrium.levels import Level, Series, level_of
from soak.analysis.equilibrium.machine import (
    Dated,
    Event,
    Machine,
    Phase,
    Withdrawn,
    not_reached_reason,
)
from soak.analysis.equilibrium.offline import Equilibrium, detect
from soak.analysis.equilibrium.online import OnlineDetector
from soak.analysis.equilibrium.refutation import Refutation, Withdrawal
from soak.analysis.equilibrium.signals import Signals, choose_basis

__all__ = [
    "CheckResult",
    "Dated",
    "Drift",
    "Equilibrium",
    "Event",
    "Fit",
    "Level",
    "Machine",
    "OnlineDetector",
    "Phase",
    "Refutation",
    "Series",
    "Signals",
    "Withdrawal",
    "Withdrawn",
    "check_window",
    "choose_basis",
    "detect",
    "drift",
    "fit_exponential",
    "level_of",
    "not_reached_reason",
]
