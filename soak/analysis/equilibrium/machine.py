"""The state machine: searching → dated → withdrawn → dated …, one check at a time.

``Machine.step(t, signals)`` makes the check scheduled at ``t`` and returns what changed
(``Dated``, ``Withdrawn``). The online detector steps it as checks fall due; ``detect``
replays it over the stored series, so both find the same times by construction.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from dataclasses import dataclass, field

from soak.analysis.equilibrium.check import (
    CheckResult,
    check_window,
    floor_of,
    is_basis,
    stepped,
)
from soak.analysis.equilibrium.levels import LONG_SCALE, Level, Series, level_of
from soak.analysis.equilibrium.refutation import MOVED, STEPPED, Refutation, Withdrawal, compare
from soak.analysis.equilibrium.scale import Scale, choose, floor_factor
from soak.analysis.equilibrium.signals import Signals
from soak.profile import Windows


class Phase(enum.StrEnum):
    SEARCHING = "searching"  # no date yet
    DATED = "dated"  # a date stands; later levels are watched
    WITHDRAWN = "withdrawn"  # a date was withdrawn; searching again


@dataclass(frozen=True, slots=True)
class Dated:
    """Equilibrium is dated at ``time_s``, confirmed by the check at ``confirmed_s``."""

    time_s: float
    confirmed_s: float
    basis: str
    again: bool = False  # after a withdrawal
    # the counted pass whose date stands: which signals judged it, set it, were set aside
    check: CheckResult | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class Withdrawn:
    """A date was withdrawn; the machine searches again."""

    withdrawal: Withdrawal


Event = Dated | Withdrawn


@dataclass(frozen=True, slots=True)
class Clauses:
    """The rule's clauses beyond the two-window test, each on unless switched off: what a
    bench or a test measures a clause by (off against on). Not an operator's option."""

    long_scale: bool = True  # line 7: a failed check made again on 10-min windows
    agree: bool = True  # line 9: a later counted pass can overrule an earlier one's date
    withdrawal: bool = True  # lines 10–13: later levels refute a date
    step: bool = True  # line 12: a step refutes against the level from the date
    replay: bool = True  # line 13: the checks before the withdrawal made again
    clock: bool = True  # line 1: the SM clock judged beside a measured throughput
    scale: bool = True  # line 16: the windows from the device's fitted τ and scatter

    def without(self, *names: str) -> Clauses:
        """These clauses, with ``names`` off."""
        unknown = sorted(set(names) - set(CLAUSE_NAMES))
        if unknown:
            raise ValueError(f"no clause named {', '.join(unknown)} (clauses: {CLAUSE_NAMES})")
        return dataclasses.replace(self, **dict.fromkeys(names, False))


CLAUSE_NAMES = tuple(f.name for f in dataclasses.fields(Clauses))


def look_back_s(windows: Windows) -> float:
    """How far before a check the machine reads: two 10-min windows, and the checks made
    again after a withdrawal."""
    return 2 * LONG_SCALE * windows.eq_window_s + windows.eq_checks * windows.eq_check_interval_s


class Machine:
    """One device's equilibrium rule, from one scheduled check to the next."""

    def __init__(
        self, windows: Windows, load_start_s: float | None = None, clauses: Clauses | None = None
    ) -> None:
        self.windows = windows  # the profile's, until ``choose_scale`` (rule, line 16)
        self.profile_windows = windows
        self.scale: Scale | None = None
        self._floor_factor = 1.0
        self.clauses = Clauses() if clauses is None else clauses  # all on, unless given
        self.load_start_s = load_start_s  # the longer scale needs 4 windows of load
        self.basis: str | None = None
        self.last: CheckResult | None = None
        self.time_s: float | None = None  # the date: the first counted pass not overruled
        self.confirmed_s: float | None = None  # the check that completed the count
        self.dating: CheckResult | None = None  # the counted pass whose date stands
        self.withdrawn: list[Withdrawal] = []
        self._passes: list[CheckResult] = []  # the counted passes of the last window's time
        self._anchor: dict[str, Level] | None = None  # the 5 min from the date, per signal
        self._stepped: set[str] = set()  # the signals that stepped since the date (line 12)

    def choose_scale(self, signals: Signals) -> Scale:
        """The device's windows from its temperature since the load start (rule, line 16;
        ``scale.choose``), made once, at ``scale.chosen_at_s``, before the first check."""
        assert self.load_start_s is not None and self.last is None
        profile = self.profile_windows
        if self.clauses.scale:
            scale = choose(profile, self.load_start_s, signals.temp)
        else:
            scale = Scale(profile, why="switched off")
        self.scale, self.windows = scale, scale.windows
        self._floor_factor = floor_factor(scale.windows, profile)
        return scale

    def next_check_s(self, t_check: float) -> float:
        """The check after ``t_check``: on the grid of the windows it searches on while
        searching, on the profile's once dated (the watch's, rule line 16), each from
        load start + 2W every interval."""
        assert self.load_start_s is not None
        w = self.profile_windows if self.time_s is not None else self.windows
        first = self.load_start_s + 2 * w.eq_window_s
        k = max(math.floor((t_check - first) / w.eq_check_interval_s + 1e-9) + 1, 0)
        return first + w.eq_check_interval_s * k

    @property
    def phase(self) -> Phase:
        if self.time_s is not None:
            return Phase.DATED
        return Phase.WITHDRAWN if self.withdrawn else Phase.SEARCHING

    def idle(self, t_check: float) -> bool:
        """Whether the step at ``t_check`` has nothing to do: dated, and the older of the
        check's two 5-min windows (the profile's: the watch's, rule line 16) does not yet
        start at the date."""
        date = self.time_s
        return date is not None and t_check < date + 2 * self.profile_windows.eq_window_s

    def step(self, t_check: float, signals: Signals) -> list[Event]:
        """The check scheduled at ``t_check``, on series holding its windows' data."""
        events: list[Event] = []
        if not self.clauses.clock:
            signals = signals.without_clock_beside_rates()
        if self.time_s is not None and not self.idle(t_check) and self.clauses.withdrawal:
            gone = self._watch(t_check, signals)
            if gone is not None:
                events.append(Withdrawn(gone))
                if self.clauses.replay:
                    events += self._replay(t_check, signals)
        if self.time_s is None:
            events += self._search(t_check, signals)
        return events

    def reason(self, load_s: float) -> str:
        """Why equilibrium is not dated after a load of ``load_s`` seconds ("" where it is)."""
        if self.time_s is not None:
            return ""
        return not_reached_reason(load_s, self.last, self.windows, len(self._passes))

    def passes_needed(self) -> int:
        """How many more passing checks a date needs (0 once dated)."""
        if self.time_s is not None:
            return 0
        return max(self.windows.eq_checks - len(self._passes), 0)

    def _search(self, t_check: float, signals: Signals) -> list[Event]:
        """Make the check; a date where it completes the count of passes."""
        result = self._check(t_check, signals)
        w = self.windows
        recent = [r for r in self._passes if r.t_s > t_check - w.eq_window_s]
        self._passes = [*recent, result] if result.passed else recent
        if len(self._passes) < w.eq_checks:
            return []
        self.dating = self._dating()
        self.time_s, self.confirmed_s = self.dating.centre_s, result.t_s
        self._anchor, self._stepped = None, set()
        assert self.basis is not None
        again = bool(self.withdrawn)
        return [Dated(self.time_s, result.t_s, self.basis, again, self.dating)]

    def _dating(self) -> CheckResult:
        """The first counted pass that no later counted pass overrules (rule, line 9): its
        date is the device's; the last one always stands."""
        passes = self._passes
        if not self.clauses.agree:
            return passes[0]
        for k, result in enumerate(passes):
            if not any(later.overrules(result.centre_s) for later in passes[k + 1 :]):
                return result
        raise AssertionError("the last pass has no later pass to overrule it")

    def _check(self, t_check: float, signals: Signals) -> CheckResult:
        """The check on the 5-min scale, and where it fails on the 10-min one."""
        w = self.windows.eq_window_s
        basis = signals.basis(t_check - 2 * w, t_check, self.basis)
        if basis != self.basis:  # a better sensor came: its passes start their own count
            self.basis, self._passes = basis, []
        factor = self._floor_factor
        result = check_window(t_check, signals, self.windows, basis, floor_factor=factor)
        long_w = LONG_SCALE * w
        start = self.load_start_s
        old_enough = start is not None and t_check - 2 * long_w >= start
        if not result.passed and old_enough and self.clauses.long_scale:
            longer = check_window(t_check, signals, self.windows, basis, long_w, factor)
            if longer.passed:
                result = longer
        self.last = result
        return result

    def _replay(self, t_check: float, signals: Signals) -> list[Event]:
        """After a withdrawal: the checks of the last window's time made again, so that a
        device settled since is dated again now; the check at ``t_check`` follows."""
        events: list[Event] = []
        interval = self.windows.eq_check_interval_s
        for k in range(self.windows.eq_checks - 1, 0, -1):
            if self.time_s is None:
                events += self._search(t_check - k * interval, signals)
        return events

    def _watch(self, t_check: float, signals: Signals) -> Withdrawal | None:
        """Whether later levels refute the date; if they do, withdraw it. The watch reads the
        profile's windows whatever the device was dated on (rule, line 16): what refutes a
        date over a long soak does not depend on how soon it was confirmed."""
        date, w = self.time_s, self.profile_windows.eq_window_s
        assert date is not None and self.basis is not None
        judged = signals.judged(
            self.basis, self.profile_windows, t_check - 2 * LONG_SCALE * w, t_check
        )
        if self._anchor is None:  # the first watch: the 5 min from the date are in
            self._anchor = self._levels_from_date(signals)
        found = []
        for name, series, absolute in judged:
            refutation = self._refute(t_check, name, series, absolute)
            if refutation is not None:
                found.append(refutation)
        if not found:
            return None
        gone = Withdrawal(date, t_check, tuple(found))
        self.withdrawn.append(gone)
        self.time_s = self.confirmed_s = self.dating = None
        self._passes = []
        return gone

    def _refute(
        self, t_check: float, name: str, series, absolute: float | None
    ) -> Refutation | None:
        """One signal's refutation of the date at ``t_check`` (rule, lines 11, 12), where the
        signal can judge (line 1: the basis always; another where its floor at ``t_check``
        is under its tolerance, asked only of a refutation found, which is rare)."""
        found = self._refutation(t_check, name, series, absolute)
        assert self.basis is not None
        if found is None or is_basis(name, self.basis):
            return found
        floor = floor_of(series, t_check, self.profile_windows, absolute)
        return found if floor is None or floor < found.tolerance else None

    def _refutation(
        self, t_check: float, name: str, series, absolute: float | None
    ) -> Refutation | None:
        """Its step from the date's level (rule, line 12), else its movement between
        adjacent 10-min levels (line 11)."""
        date, w, long_w = (
            self.time_s,
            self.profile_windows.eq_window_s,
            LONG_SCALE * self.profile_windows.eq_window_s,
        )
        assert date is not None and self._anchor is not None
        anchor_end = date + w  # the end of the 5 min from the date
        soon = t_check - w - anchor_end <= long_w and self.clauses.step  # a step soon: noted
        if (
            soon
            and name not in self._stepped
            and stepped(series, t_check, self.profile_windows, absolute_c=absolute)
        ):
            self._stepped.add(name)
        now = level_of(series, t_check, self.profile_windows)
        if now is None:
            return None
        since = self._anchor.get(name)
        after = t_check - long_w - anchor_end  # when the 10-min window starts
        if name in self._stepped and since is not None and 0 <= after <= long_w:
            step = compare(name, since, now, self.profile_windows, absolute, STEPPED, t_check)
            if step is not None and step.refutes:
                return step
        if t_check < date + 2 * long_w:
            return None
        before = level_of(series, t_check - long_w, self.profile_windows)
        if before is None:
            return None
        moved = compare(name, before, now, self.profile_windows, absolute, MOVED, t_check)
        return moved if moved is not None and moved.refutes else None

    def _levels_from_date(self, signals: Signals) -> dict[str, Level]:
        """Each judged signal's level over the 5 min from the date: what the date says the
        signal had come to (rule, line 12)."""
        date, w = self.time_s, self.profile_windows.eq_window_s
        assert date is not None and self.basis is not None
        out = {}
        for name, series, _ in signals.judged(self.basis, self.profile_windows, date, date + w):
            # off the check grid: read once, without the rings (whose grid it would set)
            bare = Series(series.t, series.y)
            level = level_of(bare, date + w, self.profile_windows, windows_n=1)
            if level is not None:
                out[name] = level
        return out


def not_reached_reason(
    load_s: float,
    last: CheckResult | None,
    windows: Windows,
    counted: int = 0,
) -> str:
    """Why equilibrium was not reached over a load of ``load_s`` seconds, ``counted`` passes
    of the last window's time made."""
    need = 2 * windows.eq_window_s + (windows.eq_checks - 1) * windows.eq_check_interval_s
    if load_s < need:
        return (
            f"load of {load_s / 60:.1f} min is too short to confirm equilibrium: the rule "
            f"compares two {windows.eq_window_s / 60:g}-min windows at {windows.eq_checks} "
            f"checks {windows.eq_check_interval_s:g} s apart, {need / 60:.1f} min at least"
        )
    if last is None:
        return "no check could be made"
    if last.passed:
        return (
            f"{counted} check(s) of the last {windows.eq_window_s / 60:g} min passed, fewer "
            f"than the {windows.eq_checks} it needs"
        )
    moved = any(d.change is not None and not d.passed for d in last.drifts)
    verdict = "still moving" if moved else "could not be judged"
    return f"{verdict} at the end of the load: {last.reason}"
