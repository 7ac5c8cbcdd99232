"""Levels and their noise: a window's level from its 30-s batch levels (rule, line 2).

A series that keeps ``Rings`` computes each batch level once, when its batch is complete,
with the pieces (a short window's batches) and levels made of them, and keeps them in
fixed-size rings indexed by the batch's place on the check grid: a check reads the same
few entries at hour 1 and hour 168, and memory holds the rings, not the run."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache

import numpy as np
from scipy import special

from soak.profile import Windows

MIN_POINTS = 10  # fewer readings than this in a window and its level cannot be judged
BATCHES = 10  # batches per window: the usual 10–30 of batch means, the fewest that leave df
MIN_BATCH_SHARE = 0.8  # a window with more gaps than this says nothing about its level
CONFIDENCE = 0.95  # one-sided: noise can make a date later, never earlier
SPREAD_MIN = 8  # fewer readings in a batch than this and its spread says nothing
LONG_SCALE = 2  # the longer windows, in eq_window_s: long enough to span a fan's cycle
MAX_SLOTS = 1 << 14  # a ring's most slots: the rings are caches checked by tag, so a profile
# whose windows hold more batches than this (a window of a millisecond) recomputes, never
# allocates past it
AHEAD = 64  # batches computed at once past the one asked for, where the data holds them


@dataclass(frozen=True, slots=True)
class Series:
    """Samples of one quantity: times and values (NaN where unreadable). ``cache`` keeps
    the batch levels already computed on it, so that each is computed once."""

    t: np.ndarray
    y: np.ndarray
    cache: Rings | None = field(default=None, compare=False, repr=False)

    def window(self, start: float, end: float) -> Series:
        """The samples in (start, end]."""
        lo, hi = self.t.searchsorted((start, end), side="right")
        return Series(self.t[lo:hi], self.y[lo:hi])

    def cached(self, horizon_s: float) -> Series:
        """The same samples, with rings reaching back ``horizon_s``."""
        return Series(self.t, self.y, Rings(horizon_s))


@dataclass(frozen=True, slots=True)
class Piece:
    """``BATCHES`` consecutive batches, one short window: the batches' finite medians, their
    squared residuals about their own least-squares line (None with fewer than 3), the
    readings in them, and the batches' spreads (``read_noise``), those known, sorted."""

    finite: np.ndarray
    squares: float | None
    readings: int
    spreads: tuple[float, ...] = ()


@dataclass(frozen=True, slots=True)
class Level:
    """A signal's level over one or more ``eq_window_s`` windows, with what its noise needs:
    batch count, and squared residuals about each window's line and their degrees of
    freedom."""

    level: float
    batches: int
    squares: float
    df: int


class Rings:
    """One series' batch levels, pieces and levels, each kept in a ring of fixed size
    indexed by its end's place on the batch grid (slot = index mod size). Only what ends
    before the series' latest sample is kept: a sample at the very end may still have
    company on its way."""

    def __init__(self, horizon_s: float) -> None:
        self.horizon_s = horizon_s
        self.origin_s = self.width_s = math.nan  # the grid: the first batch edge asked for
        self.size = 0
        self._others: dict[float, Rings] = {}  # the rings of other batch widths

    def for_width(self, width_s: float) -> Rings:
        """The rings of batches ``width_s`` long: these, or rings of their own beside them
        (a device's scaled windows and the profile's that its watch reads, rule line 16)."""
        if not self.size or width_s == self.width_s:
            return self
        found = self._others.get(width_s)
        if found is None:
            found = self._others[width_s] = Rings(self.horizon_s)
        return found

    def grid(self, edge_s: float, width_s: float) -> int | None:
        """The grid index of a batch edge (None off the grid)."""
        if not self.size:
            self._start(edge_s, width_s)
        k = (edge_s - self.origin_s) / self.width_s
        j = round(k)
        return j if abs(k - j) < 1e-6 and width_s == self.width_s and j >= 0 else None

    def _start(self, origin_s: float, width_s: float) -> None:
        self.origin_s, self.width_s = origin_s, width_s
        slots = min(self.horizon_s / width_s, MAX_SLOTS)  # a float: 1e300 / 1e-10 is inf
        self.size = size = math.ceil(slots) + AHEAD + 2 * BATCHES
        self._levels = [math.nan] * size  # each batch's median, by slot
        self._counts = [0] * size  # and its reading count
        self._spreads = [math.nan] * size  # and its spread
        self._tags = [-1] * size  # the grid index each slot holds (-1: none)
        self._pieces: list[Piece | None] = [None] * size
        self._piece_tags = [-1] * size
        self._kept: dict[int, tuple[list[Level | None], list[int]]] = {}  # levels by n

    def piece(self, s: Series, j: int) -> Piece:
        """The piece whose last batch ends at grid index ``j``."""
        slot = j % self.size
        if self._piece_tags[slot] == j:
            return self._pieces[slot]  # type: ignore[return-value]
        return self._fill(s, j)

    def _fill(self, s: Series, j: int) -> Piece:
        """Piece ``j``, and the pieces after it up to ``AHEAD`` batches on where the data
        holds them complete."""
        complete = _complete(s, self.origin_s, self.width_s)
        last = max(j, min(j + AHEAD, complete))
        first = j - BATCHES + 1
        levels, counts, spreads = self._batches(s, first, last, complete)
        origin, width = self.origin_s, self.width_s
        if last == j:  # a check's one new piece
            edges = [origin + width * k for k in range(first - 1, j + 1)]
            made = [_piece(levels, counts, edges, spreads)]
        else:
            edges = origin + width * np.arange(first - 1, last + 1)
            made = _pieces(np.array(levels), np.array(counts), edges, np.array(spreads))
        for k, piece in enumerate(made[: max(complete - j + 1, 0)]):
            self._pieces[(j + k) % self.size], self._piece_tags[(j + k) % self.size] = piece, j + k
        return made[0]

    def _batches(
        self, s: Series, first: int, last: int, complete: int
    ) -> tuple[list[float], list[int], list[float]]:
        """The levels, counts and spreads of batches ``first`` to ``last``: those kept from
        the ring, the others computed (at once, or one by one where one or two are new) and
        kept where complete."""
        size, tags = self.size, self._tags
        slots = [k % size for k in range(first, last + 1)]
        levels = [self._levels[i] for i in slots]
        counts = [self._counts[i] for i in slots]
        spreads = [self._spreads[i] for i in slots]
        new = next((k for k, i in enumerate(slots) if tags[i] != first + k), len(slots))
        if new == len(slots):
            return levels, counts, spreads
        if len(slots) - new <= 2:
            for k in range(new, len(slots)):
                lo, hi = (self.origin_s + self.width_s * i for i in (first + k - 1, first + k))
                levels[k], counts[k], spreads[k] = _batch(s, lo, hi)  # its edges as the chunk's
        else:  # the first batch not kept and all after it, at once
            edges = self.origin_s + self.width_s * np.arange(first + new - 1, last + 1)
            more, n, spread = _batches(s, edges)
            levels[new:], counts[new:], spreads[new:] = more.tolist(), n.tolist(), spread.tolist()
        for k in range(new, min(len(slots), complete - first + 1)):
            i = slots[k]
            self._levels[i], self._counts[i], tags[i] = levels[k], counts[k], first + k
            self._spreads[i] = spreads[k]
        return levels, counts, spreads

    def level(self, j: int, windows_n: int) -> Level | bool | None:
        """The level of ``windows_n`` windows ending at index ``j`` kept, False where none."""
        kept = self._kept.get(windows_n)
        if kept is None or kept[1][j % self.size] != j:
            return False
        return kept[0][j % self.size]

    def keep_level(self, s: Series, j: int, windows_n: int, level: Level | None) -> None:
        if self.origin_s + j * self.width_s >= _last_t(s):
            return
        levels, tags = self._kept.setdefault(windows_n, ([None] * self.size, [-1] * self.size))
        levels[j % self.size], tags[j % self.size] = level, j

    def forget_from(self, t_s: float) -> None:
        """A sample at ``t_s`` came after what holds its time was computed: drop that."""
        for other in self._others.values():
            other.forget_from(t_s)
        if not self.size:
            return
        first = math.floor((t_s - self.origin_s) / self.width_s)  # the batch holding t_s
        for tags in (self._tags, self._piece_tags, *(kept[1] for kept in self._kept.values())):
            for slot, tag in enumerate(tags):
                if tag >= first:
                    tags[slot] = -1


@cache
def t_quantile(df: int) -> float:
    """Student's t at the rule's confidence (one-sided), for ``df`` degrees of freedom
    (``scipy.special.stdtrit``, which ``scipy.stats.t.ppf`` calls: the same values, without
    importing scipy.stats, a second of every start)."""
    return float(special.stdtrit(df, CONFIDENCE))


def line(x: np.ndarray, y: np.ndarray) -> tuple[float, float, np.ndarray]:
    """Least-squares line of y in x: its slope, Σ(x − x̄)², and the residuals about it."""
    xc = x - x.sum() / x.size  # the mean, as in ``mean``
    y_mean = y.sum() / y.size
    sxx = float(np.dot(xc, xc))
    slope = float(np.dot(xc, y - y_mean) / sxx)
    return slope, sxx, y - y_mean - slope * xc


def _batches(s: Series, edges: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The median (NaN where empty), reading count and spread (``spread``) of every batch
    (edges[k], edges[k+1]] at once, by sorting on batch, then on value."""
    count = edges.size - 1
    lo, hi = s.t.searchsorted((edges[0], edges[-1]), side="right")
    t, y = s.t[lo:hi], s.y[lo:hi]
    finite = np.isfinite(y)
    if not finite.all():
        t, y = t[finite], y[finite]
    index = np.minimum(np.maximum(np.searchsorted(edges, t, side="left") - 1, 0), count - 1)
    counts = np.bincount(index, minlength=count)
    ordered = y[np.lexsort((y, index))]
    if counts.min() >= SPREAD_MIN:  # every batch filled, and wide: the same, unmasked
        first = np.cumsum(counts) - counts
        levels = (ordered[first + (counts - 1) // 2] + ordered[first + counts // 2]) / 2
        quarter = counts // 4
        middle = ordered[first + counts - 1 - quarter] - ordered[first + quarter]
        return levels, counts, middle / np.sqrt(counts)
    filled = counts > 0
    levels = np.full(count, np.nan)
    first = (np.cumsum(counts) - counts)[filled]
    n = counts[filled]
    levels[filled] = (ordered[first + (n - 1) // 2] + ordered[first + n // 2]) / 2
    spreads = np.full(count, np.nan)
    wide = n >= SPREAD_MIN
    quarter = n[wide] // 4
    middle = ordered[first[wide] + n[wide] - 1 - quarter] - ordered[first[wide] + quarter]
    spreads[np.flatnonzero(filled)[wide]] = middle / np.sqrt(n[wide])
    return levels, counts, spreads


def _batch(s: Series, lo: float, hi: float) -> tuple[float, int, float]:
    """One batch's median (NaN where empty), reading count and spread, as ``_batches`` has
    them."""
    y = s.y[s.t.searchsorted(lo, side="right") : s.t.searchsorted(hi, side="right")]
    y = np.sort(y[np.isfinite(y)])
    n = y.size
    level = float((y[(n - 1) // 2] + y[n // 2]) / 2) if n else math.nan
    if n < SPREAD_MIN:
        return level, n, math.nan
    return level, n, float(y[n - 1 - n // 4] - y[n // 4]) / math.sqrt(n)


def _pieces(
    levels: np.ndarray, counts: np.ndarray, edges: np.ndarray, spreads: np.ndarray
) -> list[Piece]:
    """Every piece of ``BATCHES`` consecutive batches of (edges[k], edges[k + 1]], in order
    of their ends; the noise of those without gaps about their lines at once."""
    rows = levels.size - BATCHES + 1
    if rows == 1:
        return [_piece(levels.tolist(), counts.tolist(), edges.tolist(), spreads.tolist())]
    centres = (edges[:-1] + edges[1:]) / 2
    y, x = _rows(levels, rows), _rows(centres, rows)
    spread = _rows(spreads, rows)
    n = _rows(counts, rows).sum(axis=1).tolist()
    finite = np.isfinite(y)
    whole = finite.all(axis=1)
    if whole.all():  # the noise about the piece's own line: a trend is not noise
        squares = _squares(x, y).tolist()
    else:
        squares = np.full(rows, np.nan)
        if whole.any():
            squares[whole] = _squares(x[whole], y[whole])
        squares = squares.tolist()
    # each row's known spreads, sorted (``_known``): NaN sorts last
    known = np.isfinite(spread).sum(axis=1).tolist()
    ordered = np.sort(spread, axis=1).tolist()
    out = []
    for k, full in enumerate(whole.tolist()):
        if full:
            out.append(Piece(y[k], squares[k], n[k], tuple(ordered[k][: known[k]])))
        else:
            out.append(_gapped(x[k], y[k], n[k], spread[k]))
    return out


def _piece(
    levels: list[float], counts: list[int], edges: list[float], spreads: list[float]
) -> Piece:
    """One piece, as ``_pieces`` has it, in Python floats: a check's one new piece costs
    less so, and the sums are numpy's, in numpy's order (``_sum``)."""
    y_sum = _sum(levels)
    if not math.isfinite(y_sum):  # an empty batch (NaN)
        e = np.array(edges)
        return _gapped((e[:-1] + e[1:]) / 2, np.array(levels), sum(counts), spreads)
    x = [(a + b) / 2 for a, b in itertools.pairwise(edges)]
    x_mean, y_mean = _sum(x) / BATCHES, y_sum / BATCHES
    xc = [v - x_mean for v in x]
    yc = [v - y_mean for v in levels]
    slope = _sum([a * b for a, b in zip(xc, yc, strict=True)]) / _sum([a * a for a in xc])
    resid = [b - slope * a for a, b in zip(xc, yc, strict=True)]
    return Piece(np.array(levels), _sum([r * r for r in resid]), sum(counts), _known(spreads))


def _sum(v: list[float]) -> float:
    """``np.sum`` of a short list, in its order: pairwise by eight partial sums, then the
    rest one by one (numpy's ``pairwise_sum`` below 128 values)."""
    n = len(v)
    if n < 8:
        total = 0.0
        for a in v:
            total += a
        return total
    r = v[:8]
    for i in range(8, n - n % 8, 8):
        for k in range(8):
            r[k] += v[i + k]
    total = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
    for i in range(n - n % 8, n):
        total += v[i]
    return total


def _squares(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The squared residuals of each row of y about its least-squares line in x (rows of
    ``BATCHES``; one row or many, the same sums in the same order)."""
    xc = x - (x.sum(axis=-1) / BATCHES)[..., None]
    yc = y - (y.sum(axis=-1) / BATCHES)[..., None]
    slope = (xc * yc).sum(axis=-1) / (xc * xc).sum(axis=-1)
    resid = yc - slope[..., None] * xc
    return (resid * resid).sum(axis=-1)


def _rows(a: np.ndarray, rows: int) -> np.ndarray:
    """Every run of ``BATCHES`` consecutive entries of ``a``, one row each (a copy)."""
    if rows == 1:
        return a.reshape(1, BATCHES).copy()
    return a[_row_index(rows)]


@cache
def _row_index(rows: int) -> np.ndarray:
    """The indices of ``_rows``: row k holds k, k + 1, …, k + BATCHES − 1."""
    return np.arange(rows)[:, None] + np.arange(BATCHES)


def _gapped(
    x: np.ndarray, y: np.ndarray, readings: int, spreads: Iterable[float] | np.ndarray
) -> Piece:
    """A piece with empty batches: its noise about the line of those it has."""
    ok = np.isfinite(y)
    kept, squares = y[ok], None
    if kept.size >= 3:
        _, _, resid = line(x[ok], kept)
        squares = float(resid @ resid)
    return Piece(kept, squares, readings, _known(np.asarray(spreads, dtype=float).tolist()))


def _complete(s: Series, origin_s: float, width_s: float) -> int:
    """The last grid index whose batch ends before the series' latest sample (-1: none)."""
    if not s.t.size:
        return -1
    return math.ceil((float(s.t[-1]) - origin_s) / width_s) - 1


def _last_t(s: Series) -> float:
    """The latest sample's time: levels ending before it are complete and may be kept
    (a sample at the very end may still have company on its way)."""
    return float(s.t[-1]) if s.t.size else -math.inf


def pieces(s: Series, t_check: float, window_s: float, per_window: int = BATCHES) -> list[Piece]:
    """The pieces of (t_check − 2W, t_check], ``2·per_window / BATCHES`` of them, from the
    rings where the series keeps them."""
    count = 2 * per_window
    width = 2 * window_s / count
    start = t_check - 2 * window_s
    rings = None if s.cache is None else s.cache.for_width(width)
    first = rings.grid(start, width) if rings is not None else None
    if first is None or rings is None:
        edges = start + width * np.arange(count + 1)
        levels, counts, spreads = _batches(s, edges)
        return [
            _pieces(
                levels[k : k + BATCHES],
                counts[k : k + BATCHES],
                edges[k : k + BATCHES + 1],
                spreads[k : k + BATCHES],
            )[0]
            for k in range(0, count, BATCHES)
        ]
    return [rings.piece(s, first + k) for k in range(BATCHES, count + 1, BATCHES)]


def residuals(parts: list[Piece]) -> tuple[float, int]:
    """The squared residuals of the pieces' batch levels about each piece's own line, and
    their degrees of freedom."""
    squares, df = 0.0, 0
    for p in parts:
        if p.squares is not None:
            squares += p.squares
            df += p.finite.size - 2
    return squares, df


def _known(spreads: Iterable[float]) -> tuple[float, ...]:
    """The spreads a batch could measure (not NaN), sorted."""
    return tuple(sorted(x for x in spreads if x == x))


def read_noise(parts: list[Piece]) -> float | None:
    """How far its own readings' scatter moves a batch's level (rule, line 1): per batch,
    the spread of its middle half of readings over the root of their number (a median's
    standard error, for an even spread or a normal one); their median over the pieces'
    batches. A trend, a cycle or a step between batches does not enter it, and a step
    inside one batch moves the median of many little. None where no batch holds
    ``SPREAD_MIN`` readings."""
    spreads = sorted(itertools.chain.from_iterable(p.spreads for p in parts))
    n = len(spreads)
    if not n:
        return None
    return (spreads[(n - 1) // 2] + spreads[n // 2]) / 2


def level_of(s: Series, end_s: float, windows: Windows, windows_n: int = 2) -> Level | None:
    """The level of (end − n·W, end] (n = ``windows_n`` eq_window_s windows, two by default:
    the 10-min level); None where it holds too few readings to say."""
    width = windows.eq_window_s / BATCHES
    rings = None if s.cache is None else s.cache.for_width(width)
    j = rings.grid(end_s, width) if rings is not None else None
    if rings is None or j is None or j < BATCHES * windows_n:
        w = windows.eq_window_s
        parts = pieces(s, end_s, w * windows_n / 2, BATCHES * windows_n // 2)
        return _level(parts, windows_n)
    known = rings.level(j, windows_n)
    if known is not False:
        return known  # type: ignore[return-value]
    parts = [rings.piece(s, j - BATCHES * k) for k in range(windows_n - 1, -1, -1)]
    level = _level(parts, windows_n)
    rings.keep_level(s, j, windows_n, level)
    return level


def _level(parts: list[Piece], windows_n: int) -> Level | None:
    """The level of ``windows_n`` windows' pieces, None where they hold too few readings."""
    readings = filled = 0
    for p in parts:
        readings += p.readings
        filled += p.finite.size
    enough = math.ceil(MIN_BATCH_SHARE * BATCHES * windows_n)
    if readings < MIN_POINTS * windows_n or filled < enough:
        return None
    squares, df = residuals(parts)
    return Level(mean(np.concatenate([p.finite for p in parts])), filled, squares, df)


def mean(y: np.ndarray) -> float:
    """``float(y.mean())``, as ndarray.mean computes it (the sum over the count), with less
    overhead."""
    return float(_add(y) / y.size)


_add = np.add.reduce  # what ndarray.sum calls, without its wrapper
