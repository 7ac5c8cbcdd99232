"""The run store's column blocks: many rows of one series (a device's telemetry, a device's
work in one part, a device's ddp steps) packed into one BLOB, and a series assembled back
from its blocks and its row tail with one allocation per column.

A block is self-describing, so that a block written before a field existed reads that field
as not read, and a salvage needs nothing but the block itself:

1. ``MAGIC`` (8 bytes), the header's length (uint32, little-endian), the header: JSON
   ``{"rows": n, "columns": [[name, tag, bytes], ...]}`` in the block's declared order.
2. Each column's bytes, in that order, by its tag: ``c`` one float64 (the column holds the
   same bits throughout the block: a limit, a counter that never moved, a field not read);
   ``z`` zlib of its float64s; ``s`` zlib of its float64s byte-shuffled (every value's
   first byte, then every second byte, …: values that move slowly share their high bytes);
   ``r`` the float64s as they are. A varying column takes the smallest of ``r``, ``z``,
   ``s`` (measured on the simulator's telemetry: ``z`` and ``s`` each win on some columns,
   together 6 to 7 times smaller than ``r``).
3. A CRC-32 of everything before it (uint32): a block reads whole or is refused
   (``BlockDamaged``), never with a flipped byte read as a reading.

Values are little-endian float64: NaN is a value not read, integers (counters, bitmasks) are
exact to 2**53, as the row layout reads them back.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

import numpy as np

MAGIC = b"SOAKBLK1"
_LENGTH = struct.Struct("<I")
_FLOAT = np.dtype("<f8")
_LEVEL = 1  # zlib level: 6 is 8 % smaller on the simulator's telemetry at 2.5 times the time
_NAN = np.full(1, np.nan)


class BlockDamaged(ValueError):
    """A block whose bytes do not hold together (checksum, lengths, header)."""


def holds_still(column: np.ndarray) -> bool:
    """Whether a column holds the same bits throughout (NaN included): stored, and read
    back, as one value."""
    return bool(column.size) and bool((column.view(np.int64) == column[:1].view(np.int64)).all())


def encode(columns: Mapping[str, np.ndarray]) -> bytes:
    """One block of equally long float columns, in the mapping's order."""
    arrays = {name: np.ascontiguousarray(c, dtype=_FLOAT) for name, c in columns.items()}
    sizes = {a.size for a in arrays.values()}
    if len(sizes) > 1:
        raise ValueError(f"columns of unequal length in one block: {sorted(sizes)}")
    rows = sizes.pop() if sizes else 0
    described, payloads = [], []
    for name, column in arrays.items():
        tag, data = _encoded(column)
        described.append([name, tag, len(data)])
        payloads.append(data)
    header = json.dumps({"rows": rows, "columns": described}, separators=(",", ":")).encode()
    body = b"".join([MAGIC, _LENGTH.pack(len(header)), header, *payloads])
    return body + _LENGTH.pack(zlib.crc32(body))


def _encoded(column: np.ndarray) -> tuple[str, bytes]:
    if holds_still(column):
        return "c", column[:1].tobytes()
    raw = column.tobytes()
    shuffled = column.view(np.uint8).reshape(column.size, 8).T.tobytes()
    choices = (
        ("r", raw),
        ("z", zlib.compress(raw, _LEVEL)),
        ("s", zlib.compress(shuffled, _LEVEL)),
    )
    return min(choices, key=lambda choice: len(choice[1]))


@dataclass(frozen=True, slots=True)
class Block:
    """A decoded block: ``rows`` rows of each named column; a column in ``still`` holds one
    value throughout (its array is that value broadcast, read-only)."""

    rows: int
    columns: dict[str, np.ndarray]
    still: frozenset[str]


def decode(blob: bytes, names: Collection[str] | None = None) -> Block:
    """The columns of one block (``names``: those only, the rest checked but not decoded);
    BlockDamaged where its bytes do not hold together."""
    if not isinstance(blob, bytes) or len(blob) < len(MAGIC) + 2 * _LENGTH.size:
        raise BlockDamaged("not a column block")
    body, (crc,) = blob[:-4], _LENGTH.unpack(blob[-4:])
    if not body.startswith(MAGIC):
        raise BlockDamaged("not a column block")
    if zlib.crc32(body) != crc:
        raise BlockDamaged("column block fails its checksum")
    start = len(MAGIC) + _LENGTH.size
    (length,) = _LENGTH.unpack(body[len(MAGIC) : start])
    try:
        header = json.loads(body[start : start + length])
        rows = header["rows"]
        described = [(str(n), str(t), int(b)) for n, t, b in header["columns"]]
    except (ValueError, KeyError, TypeError) as exc:  # JSON, UTF-8, shape
        raise BlockDamaged(f"column block header unreadable ({exc})") from exc
    if not isinstance(rows, int) or rows < 0:
        raise BlockDamaged(f"column block of {rows!r} rows")
    at = start + length
    if at + sum(b for _, _, b in described) != len(body):
        raise BlockDamaged("column block lengths do not add up")
    columns, still = {}, set()
    for name, tag, size in described:
        if names is None or name in names:
            columns[name] = _decoded(tag, body[at : at + size], rows)
            if tag == "c":
                still.add(name)
        at += size
    return Block(rows, columns, frozenset(still))


def _decoded(tag: str, data: bytes, rows: int) -> np.ndarray:
    try:
        if tag == "c" and len(data) == _FLOAT.itemsize:
            return np.broadcast_to(np.frombuffer(data, _FLOAT), (rows,))
        if tag in ("z", "s"):
            data = zlib.decompress(data)
        if tag in ("r", "z", "s") and len(data) == rows * _FLOAT.itemsize:
            if tag == "s":
                planes = np.frombuffer(data, np.uint8).reshape(8, rows)
                return np.ascontiguousarray(planes.T).view(_FLOAT).reshape(rows)
            return np.frombuffer(data, _FLOAT)
    except zlib.error as exc:
        raise BlockDamaged(f"column block unreadable ({exc})") from exc
    raise BlockDamaged(f"column block holds a column tagged {tag!r} of {len(data)} bytes")


class Assembler:
    """One series' columns assembled from its parts in time order (its blocks, then its row
    tail) into arrays of ``total`` rows, each allocated once and only where the column moves:
    a column that holds the same bits throughout (most of a device's) is never allocated and
    comes back as that value broadcast, read-only, as the store reads a still column."""

    def __init__(self, names: Iterable[str], total: int) -> None:
        self.names = tuple(names)
        self.total = int(total)
        self.filled = 0
        self._value: dict[str, np.ndarray] = {}  # a still column's one value, so far
        self._out: dict[str, np.ndarray] = {}  # a column that moves

    def add(
        self, rows: int, columns: Mapping[str, np.ndarray], still: Collection[str] = ()
    ) -> None:
        """The next ``rows`` rows; a column ``columns`` lacks is not read (NaN)."""
        end = self.filled + rows
        if end > self.total:
            raise BlockDamaged(f"{end} rows where {self.total} were counted")
        if rows == 0:
            return
        for name in self.names:
            column = columns.get(name)
            if column is None:
                part, one = _NAN, True
            elif name in still or holds_still(column):
                part, one = column[:1], True
            else:
                part, one = column, False
            out = self._out.get(name)
            if out is None:
                value = self._value.get(name)
                if one and (value is None or value.view(np.int64)[0] == part.view(np.int64)[0]):
                    if value is None:
                        self._value[name] = np.array(part, dtype=_FLOAT)
                    continue
                out = self._out[name] = np.empty(self.total, dtype=_FLOAT)
                if self.filled:
                    assert value is not None
                    out[: self.filled] = value
            out[self.filled : end] = part
        self.filled = end

    def columns(self, compact: bool = True) -> dict[str, np.ndarray]:
        """Each column of the ``total`` rows: a still one broadcast (read-only) where
        ``compact``, else every column an array of its own."""
        if self.filled != self.total:
            raise BlockDamaged(f"{self.filled} rows where {self.total} were counted")
        out = {}
        for name in self.names:
            column = self._out.get(name)
            if column is None:
                value = self._value.get(name, _NAN)
                column = (
                    np.broadcast_to(value, (self.total,))
                    if compact and self.total
                    else np.full(self.total, value[0] if self.total else np.nan)
                )
            out[name] = column
        return out
