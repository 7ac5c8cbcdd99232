"""Levels and their noise: a window's level from its 30-s batch levels (rule, line 2)."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from functools import cache

import numpy as np
from scipy import stats

from soak.config import Windows

MIN_POINTS = 10  # fewer readings than this in a window and its level cannot be judged
BATCHES = 10  # batches per window: the usual 10–30 of batch means, the fewest that leave df
MIN_BATCH_SHARE = 0.8  # a window with more gaps than this says nothing about its level
CONFIDENCE = 0.95  # one-sided: noise can make a date later, never earlier
LONG_SCALE = 2  # the longer windows, in eq_window_s: long enough to span a fan's cycle


@dataclass(frozen=True, slots=True)
class Series:
    """Samples of one quantity: times and values (NaN where unreadable). ``cache`` keeps
    the batch levels already computed on it, so that each is computed once."""

    t: np.ndarray
    y: np.ndarray
    cache: PieceCache | None = field(default=None, compare=False, repr=False)

    def window(self, start: float, end: float) -> Series:
        """The samples in (start, end]."""
        lo, hi = self.t.searchsorted((start, end), side="right")
        return Series(self.t[lo:hi], self.y[lo:hi])

    def cached(self, horizon_s: float) -> Series:
        """The same samples, with a cache of pieces reaching back ``horizon_s``."""
        return Series(self.t, self.y, PieceCache(horizon_s))


@dataclass(frozen=True, slots=True)
class Piece:
    """``BATCHES`` consecutive batches, one short window: each batch's median (NaN where
    empty) and reading count, the finite medians, and their squared residuals about their
    own least-squares line (None with fewer than 3)."""

    levels: np.ndarray
    counts: np.ndarray
    finite: np.ndarray
    squares: float | None
    readings: int


class PieceCache:
    """Batch levels and pieces by their exact edges, each computed once; those ending more
    than ``horizon_s`` before the newest are dropped, so that the cache stays bounded over
    any run length."""

    def __init__(self, horizon_s: float) -> None:
        self.horizon_s = horizon_s
        self._pieces: dict[tuple[float, ...], Piece] = {}
        self._batches: dict[tuple[float, float], tuple[float, int]] = {}
        self._levels: dict[tuple[float, int], Level | None] = {}  # (end, windows) -> level
        self._newest_s = -math.inf

    def __len__(self) -> int:
        return len(self._pieces) + len(self._batches)

    def piece(self, edges: tuple[float, ...]) -> Piece | None:
        return self._pieces.get(edges)

    def batches(self, keys: list[float]) -> list[tuple[float, int] | None]:
        """The batches (keys[k], keys[k + 1]] kept, None for each one not."""
        get = self._batches.get
        return [get(k) for k in itertools.pairwise(keys)]

    def put_piece(self, edges: tuple[float, ...], piece: Piece) -> None:
        self._pieces[edges] = piece
        if edges[-1] > self._newest_s:
            self._newest_s = edges[-1]
        if not len(self._pieces) % 64:
            _evict(self._pieces, self._newest_s - self.horizon_s)

    def level(self, end_s: float, windows_n: int) -> Level | bool | None:
        """The level kept for (end, windows), False where none is."""
        return self._levels.get((end_s, windows_n), False)

    def put_level(self, end_s: float, windows_n: int, level: Level | None) -> None:
        self._levels[end_s, windows_n] = level
        if not len(self._levels) % 64:
            _evict(self._levels, self._newest_s - self.horizon_s, 0)

    def put_batch(self, lo: float, hi: float, level: float, count: int) -> None:
        self._batches[lo, hi] = (level, count)
        if hi > self._newest_s:
            self._newest_s = hi
        if not len(self._batches) % 64:
            _evict(self._batches, self._newest_s - self.horizon_s)

    def forget_from(self, t_s: float) -> None:
        """A sample at ``t_s`` came after levels holding its time were computed: drop them."""
        if t_s <= self._newest_s:
            self._pieces = {k: p for k, p in self._pieces.items() if k[-1] < t_s}
            self._batches = {k: b for k, b in self._batches.items() if k[-1] < t_s}
            self._levels = {k: v for k, v in self._levels.items() if k[0] < t_s}
            ends = [k[-1] for k in (*self._pieces, *self._batches)]
            self._newest_s = max(ends, default=-math.inf)


def _evict(entries: dict, before_s: float, end: int = -1) -> None:
    """Drop the oldest-put entries while they end (key[end]) before ``before_s`` (the
    callers look once every 64 entries put)."""
    while entries:
        oldest = next(iter(entries))
        if oldest[end] >= before_s:
            return
        del entries[oldest]


@dataclass(frozen=True, slots=True)
class Level:
    """A signal's level over one or more ``eq_window_s`` windows, with what its noise needs:
    batch count, and squared residuals about each window's line and their degrees of
    freedom."""

    level: float
    batches: int
    squares: float
    df: int


@cache
def t_quantile(df: int) -> float:
    """Student's t at the rule's confidence (one-sided), for ``df`` degrees of freedom."""
    return float(stats.t.ppf(CONFIDENCE, df))


def line(x: np.ndarray, y: np.ndarray) -> tuple[float, float, np.ndarray]:
    """Least-squares line of y in x: its slope, Σ(x − x̄)², and the residuals about it."""
    xc = x - x.sum() / x.size  # the mean, as in ``mean``
    y_mean = y.sum() / y.size
    sxx = float(np.dot(xc, xc))
    slope = float(np.dot(xc, y - y_mean) / sxx)
    return slope, sxx, y - y_mean - slope * xc


def _batches(s: Series, edges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The median (NaN where empty) and reading count of every batch (edges[k], edges[k+1]]
    at once, by sorting on batch, then on value."""
    count = edges.size - 1
    span = s.window(edges[0], edges[-1])
    finite = np.isfinite(span.y)
    t, y = span.t[finite], span.y[finite]
    index = np.clip(np.searchsorted(edges, t, side="left") - 1, 0, count - 1)
    counts = np.bincount(index, minlength=count)
    filled = counts > 0
    levels = np.full(count, np.nan)
    ordered = y[np.lexsort((y, index))]
    first = (np.cumsum(counts) - counts)[filled]
    n = counts[filled]
    levels[filled] = (ordered[first + (n - 1) // 2] + ordered[first + n // 2]) / 2
    return levels, counts


def _batch(s: Series, lo: float, hi: float) -> tuple[float, int]:
    """One batch's median (NaN where empty) and reading count, as ``_batches`` has them."""
    i, j = s.t.searchsorted((lo, hi), side="right")  # s.window(lo, hi), without the Series
    y = s.y[i:j]
    y = y[np.isfinite(y)]
    y.sort()
    n = y.size
    return (float((y[(n - 1) // 2] + y[n // 2]) / 2) if n else math.nan), n


def _last_t(s: Series) -> float:
    """The latest sample's time: levels ending before it are complete and may be kept
    (a sample at the very end may still have company on its way)."""
    return float(s.t[-1]) if s.t.size else -math.inf


def _cached_batches(
    s: Series, cache: PieceCache, edges: np.ndarray, keys: list[float]
) -> tuple[np.ndarray, np.ndarray]:
    """``_batches`` from the cache: the few batches not in it computed one by one, all of
    them at once where most are new."""
    count = len(keys) - 1
    known = cache.batches(keys)
    last = _last_t(s)
    if known.count(None) > 2:
        levels, counts = _batches(s, edges)
        for j in range(count):
            if keys[j + 1] < last:
                cache.put_batch(keys[j], keys[j + 1], float(levels[j]), int(counts[j]))
        return levels, counts
    for j, k in enumerate(known):
        if k is None:
            known[j] = k = _batch(s, keys[j], keys[j + 1])
            if keys[j + 1] < last:
                cache.put_batch(keys[j], keys[j + 1], *k)
    return np.array([k[0] for k in known]), np.array([k[1] for k in known])  # type: ignore[index]


def _piece(s: Series, edges: np.ndarray, keys: list[float]) -> Piece:
    """The piece whose batches are (edges[k], edges[k + 1]]."""
    if s.cache is None:
        levels, counts = _batches(s, edges)
    else:
        levels, counts = _cached_batches(s, s.cache, edges, keys)
    centres = (edges[:-1] + edges[1:]) / 2
    ok = np.isfinite(levels)
    x, kept = (centres, levels) if ok.all() else (centres[ok], levels[ok])
    squares = None
    if kept.size >= 3:  # the noise about the piece's own line: a trend is not noise
        _, _, resid = line(x, kept)
        squares = float(resid @ resid)
    return Piece(levels, counts, kept, squares, int(counts.sum()))


def pieces(s: Series, t_check: float, window_s: float, per_window: int = BATCHES) -> list[Piece]:
    """The pieces of (t_check − 2W, t_check], ``2·per_window / BATCHES`` of them, from the
    cache where they are in it."""
    count = 2 * per_window
    edges = t_check - 2 * window_s + (2 * window_s / count) * np.arange(count + 1)
    keys = edges.tolist()
    cache, last = s.cache, _last_t(s)
    out = []
    for k in range(0, count, BATCHES):
        key = tuple(keys[k : k + BATCHES + 1])
        piece = cache.piece(key) if cache is not None else None
        if piece is None:
            piece = _piece(s, edges[k : k + BATCHES + 1], list(key))
            if cache is not None and key[-1] < last:
                cache.put_piece(key, piece)
        out.append(piece)
    return out


def residuals(parts: list[Piece]) -> tuple[float, int]:
    """The squared residuals of the pieces' batch levels about each piece's own line, and
    their degrees of freedom."""
    squares, df = 0.0, 0
    for p in parts:
        if p.squares is not None:
            squares += p.squares
            df += p.finite.size - 2
    return squares, df


def level_of(s: Series, end_s: float, windows: Windows, windows_n: int = 2) -> Level | None:
    """The level of (end − n·W, end] (n = ``windows_n`` eq_window_s windows, two by default:
    the 10-min level); None where it holds too few readings to say."""
    known = s.cache.level(end_s, windows_n) if s.cache is not None else False
    if known is not False:
        return known  # type: ignore[return-value]
    level = _level_of(s, end_s, windows, windows_n)
    if s.cache is not None and end_s < _last_t(s):
        s.cache.put_level(end_s, windows_n, level)
    return level


def _level_of(s: Series, end_s: float, windows: Windows, windows_n: int) -> Level | None:
    w = windows.eq_window_s
    per_window = BATCHES * windows_n // 2
    parts = pieces(s, end_s, w * windows_n / 2, per_window)
    filled = sum(p.finite.size for p in parts)
    enough = math.ceil(MIN_BATCH_SHARE * BATCHES * windows_n)
    if sum(p.readings for p in parts) < MIN_POINTS * windows_n or filled < enough:
        return None
    squares, df = residuals(parts)
    return Level(mean(np.concatenate([p.finite for p in parts])), filled, squares, df)


def mean(y: np.ndarray) -> float:
    """``float(y.mean())``, as ndarray.mean computes it (the sum over the count), with less
    overhead."""
    return float(y.sum() / y.size)
