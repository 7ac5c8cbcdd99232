"""Thermal equilibrium: one rule, used online while running and offline on the store.

The rule ("rule, line N" in the modules; docs/equilibrium.md argues each line):

1. **Judged**: the basis signal (temperature; power where temperature cannot be read;
   throughput alone where neither can), every measured SM clock and every part's
   throughput. A check passes only where all of them that judge it pass, and one does.
   A signal other than the basis whose own noise leaves its tolerance undecidable does
   not judge the check, and the check names it: where its floor t₀.₉₅·σ₀·√(2/n), n =
   ``LONG_SCALE``·``BATCHES`` (the margin its noise alone adds to any change on the rule's
   longest windows), reaches its tolerance, σ₀ being the median over the check's batches
   of the spread of a batch's middle half of readings over the root of their number. The
   basis always judges.
2. **Levels and noise**: a window of W = ``eq_window_s`` is cut into ``BATCHES`` batches of
   W/10 (30 s); a batch's level is the median of its readings, a window's level the mean of
   its batch levels, its noise the scatter of those levels about each W-long part's own
   least-squares line. A window with fewer than ``MIN_POINTS`` readings, or with readings in
   fewer than ``MIN_BATCH_SHARE`` of its batches, cannot pass.
3. **Schedule**: checks fall every ``eq_check_interval_s`` from ``load start + 2W``; the check
   at t compares window A = (t − 2W, t − W] with B = (t − W, t].
4. **Test**: a signal passes where ``|Δ| + t₀.₉₅(df)·se(Δ) < tolerance``, Δ = level(B) −
   level(A), df the pooled residual degrees of freedom.
5. **B flat**: on the W scale a signal passes only where B's halves also agree by the test
   of line 4.
6. **Tolerances**: ``eq_temp_tolerance_c`` (1 °C) for temperature; ``eq_rel_tolerance_pct``
   (1 % of B's level) for power, SM clock and throughput.
7. **Longer scale**: a check that fails, once the load is 4W old, is made again on two
   windows of ``LONG_SCALE``·W (batches still W/10, noise about each W-long part's line,
   line 5 not required); a pass there counts as a pass.
8. **Count**: the device is dated once ``eq_checks`` passing checks fall within W of each
   other (not necessarily in a row); a new basis starts the count again.
9. **Dating**: each signal dates a check at the centre of the first of the four
   half-windows A₁ A₂ B₁ B₂ from which on every half-window level lies within the tolerance
   of B's level; at A's centre where those four levels are monotone and the first is A₁ or
   A₂; never before A | B where B is not flat. A check's date is the latest of its
   signals'; the device's date is the date of the first of its counted passes that no
   later counted pass overrules: one whose half-window lying wholly after that date is
   the tolerance or more from its own B's level.
10. **Watch**: once dated, every check at t ≥ date + 2W tests each judged signal that can
    judge it (line 1) for a refutation (lines 11, 12).
11. **Movement** refutes where t ≥ date + 4W and the two adjacent 2W levels (t − 4W, t − 2W]
    and (t − 2W, t] differ by more than the tolerance with confidence: ``|Δ| − t·se >
    tolerance``.
12. **Step** refutes where the signal has stepped (at a check whose newer W window starts
    within 2W after date + W, A → B moved by more than the tolerance with confidence and B
    is flat) and a 2W level whose window starts 0 to 2W after date + W lies the tolerance or
    more (the estimate) from the level of (date, date + W].
13. **Withdrawal**: a refuted date is withdrawn; the count starts again with the
    ``eq_checks`` − 1 checks before t made again, then t's.
14. **Not reached**: a load shorter than 2W + (``eq_checks`` − 1)·interval says it is too
    short; otherwise the reason is the last check's.
15. **Online = offline**: one state machine (searching → dated → withdrawn → dated …),
    stepped by the online detector ``lag_s`` after each check's time and replayed by
    ``detect`` over the store: the same checks on the same data give the same times.
16. **Scale**: each device's W for lines 2–9 and 14 comes from its own approach. At load
    start + 2·``SHORTEST_S`` the temperature since the load start is fitted (T∞ − ΔT·e^(−t/τ);
    a temperature settled before its readings show the rise counts as τ = ``TAU_MIN_S``, a
    ramp with no bend keeps the profile's W). W is the shortest multiple of ``GRAIN_S``, at
    least ``SHORTEST_S`` and ``TAU_WINDOWS``·τ, on which the margin its noise takes,
    t₀.₉₅·σ·√(2/``BATCHES``)·√(``SHORTEST_S``/W) with σ the rms of the shortest windows' batch
    levels about the fit over the last ``SHORTEST_S`` before the choice, is at most ``QUIET``
    of the temperature tolerance; where that is not shorter than ``eq_window_s``, the
    profile's. The check interval, the stop's least steady window (``min_steady_s``) and the
    relative tolerance of line 6 are the same share of W as the profile's; line 1's floor is
    weighed as on the profile's windows; the watch (lines 10–13) reads the profile's windows.
    Chosen once, from the data up to then, online as offline.

Constants, and why:

- ``eq_window_s`` = 300 s: the shortest window whose mean averages a GPU's 1–2-s work
  intervals and 5-s sensor refresh, and short enough to date within the contract's −2/+5 min.
- ``eq_check_interval_s`` = 30 s: one batch, so each check adds one batch of new evidence.
- ``eq_checks`` = 3: one passing check can be luck at the margin, since checks 30 s apart
  share most of their data; three within W ask for it twice more.
- ``BATCHES`` = 10: the usual 10–30 batches of batch means, the fewest that leave degrees of
  freedom after a line, and 30-s batches are longer than the noise's correlation.
- ``MIN_POINTS`` = 10, ``MIN_BATCH_SHARE`` = 0.8: a window with gaps says nothing about its
  level, and then the check cannot pass rather than pass on little.
- ``CONFIDENCE`` = 0.95 one-sided: the burden lies on "settled" (line 4) and on "moved"
  (line 11), so noise can make a date later, never earlier, and cannot withdraw one.
- ``LONG_SCALE`` = 2: 10-min windows span a fan's hunt of ~10 min, which 5-min windows see
  in halves and never pass at 1 %.
- 1 °C: the resolution of GPU core sensors (NVML reports whole degrees); 1 %: the
  contract's own precision for throughput.
- The floor of line 1 on the longest windows, from the readings' scatter inside each
  batch: a signal stands aside only where no scale the rule has could resolve its
  tolerance, and only for noise faster than a batch, which a trend, a fan's cycle or a step
  between batches does not enter (slow movement is what the test is for); the median over
  20 batches of 30 readings barely moves from one check to the next, so a signal does not
  flip between judging and not. The middle half's spread over √n is a median's standard
  error for an even spread of readings (the H200's clock at its cap) and 8 % over it for a
  normal one. ``SPREAD_MIN`` = 8: a batch of fewer readings has no middle half to speak
  of (a signal read every 5 s or slower then always judges). The basis never stands aside:
  it is what "settled" means, so its noise makes a date later, never one without it.
- ``lag_s`` = 5 s: work finished before a check's time but delivered a little after it is in
  the check online, as it is in the store.
- ``SHORTEST_S`` = 240 s (line 16): the floor the real traces allow. On 3-min windows the V100
  run 42's GPU 3, whose temperature climbs 2 °C to an overshoot held from 3.5 to 8.5 min
  before it sinks, is dated 3.9 min (v100-temp 4.3 min) before its reference, outside the
  contract; on 4-min windows +1.0 min. Nothing in its first minutes (a 40-s rise, quiet
  readings) tells it from a device that has settled, so no device is judged on shorter
  windows. The choice falls at 8 min of load, the first 4-min check.
- ``TAU_WINDOWS`` = 3 (line 16): adjacent windows of W ≥ 2τ differ, for a first-order
  approach, by at least its distance at A's centre, where a monotone approach is dated
  (line 9); 3 leaves room for a τ fitted on 8 minutes.
- ``QUIET`` = 0.5 (line 16): on windows whose noise alone takes half the tolerance, line 4
  passes only a change under half of it and line 5 seldom passes at all; a device that
  noisy keeps longer windows, up to the profile's (the simulator's H100 under ``mix``, its die
  rippling 2.7 °C a read, mostly does).
- ``GRAIN_S`` = 30 s (line 16): a whole number of the profile's batches, so a scaled check
  interval (W/10) is 24–27 s.
- The relative tolerance scaled with W (line 16): a clock sliding 0.2 %/min under a flat
  temperature moves 1 % between adjacent 5-min windows and 0.8 % between 4-min ones, so the
  shorter windows hold it to the same rate and date no slide the profile's would not
  (``test_clock_still_sliding_blocks_equilibrium_even_with_flat_temperature``). The
  temperature keeps 1 °C: its τ is what chose W, and 1 °C is its sensor's step.
- The watch on the profile's windows (line 16): a date withdrawn by 8-min levels late in a
  long soak is not one the 10-min levels would withdraw (the V100 run 39's GPU 0: +1.2 °C
  between adjacent 6-min levels at 16 h, on 3-min windows), and what refutes a date does not
  depend on how soon it was confirmed.
- A later pass overrules only by a half-window wholly after the date: the half-window
  that holds a date at A's centre may lie off by the approach's own convention, and a
  half-window that holds the date cannot tell the level before it from the level after.
- The step's bound of 2W after the date's 5 min: later movement is the adjacent windows'
  to judge; comparing it with the date's level would withdraw a long soak's date for the
  room's drift. The step decides on the estimate: the step itself was shown with
  confidence, and what is left is on which side of the tolerance the date's level lies.

Modules: ``levels`` (levels and their noise, kept in rings of fixed size), ``check`` (the
test and dating), ``refutation`` (how a date is withdrawn), ``machine`` (the state machine,
and ``Clauses``: the switch of each clause beyond the two-window test, lines 7, 9's
overruling and 10–13, that benches and tests measure it by, passed to ``detect`` and the
online detector; docs/equilibrium.md says what each pays), ``offline`` (``detect``),
``online`` (the detector fed every tick), ``fit`` (the live forecast; line 16's τ),
``scale`` (line 16: each device's windows).
"""

from soak.analysis.equilibrium.check import (
    CheckResult,
    Drift,
    check_window,
    drift,
    shortest_confirmation_s,
)
from soak.analysis.equilibrium.fit import Fit, fit_exponential
from soak.analysis.equilibrium.levels import Level, Series, level_of
from soak.analysis.equilibrium.machine import (
    CLAUSE_NAMES,
    Clauses,
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
    "CLAUSE_NAMES",
    "CheckResult",
    "Clauses",
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
    "shortest_confirmation_s",
]
