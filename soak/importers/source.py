"""Reading a foreign trace file: plain, ``.gz`` or a ``.zip`` holding one file, streamed in
bounded memory, as numbered text records. Every problem is one ``ImportFailed`` naming the
file and the line."""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from soak.errors import ConfigError

CHUNK_B = 1 << 20  # read this much at a time: memory stays bounded whatever the file's size
MAX_RECORD_B = 1 << 16  # a "line" longer than this is not a trace line


class ImportFailed(ConfigError):
    """A foreign trace that cannot be read as its format: exit 2, nothing written."""

    def __init__(self, path: Path | str, line: int | None, message: str) -> None:
        where = f"{path}:{line}" if line is not None else f"{path}"
        super().__init__(f"{where}: {message}")
        self.line = line


@dataclass(frozen=True, slots=True)
class Source:
    """What was imported, recorded in the run so the report can say where it came from."""

    file: str
    size_b: int
    sha256: str
    format: str
    member: str | None = None  # the file inside a .zip

    def as_dict(self) -> dict[str, object]:
        return {
            "file": self.file,
            "size_b": self.size_b,
            "sha256": self.sha256,
            "format": self.format,
            "member": self.member,
        }


def describe(path: Path, fmt: str) -> Source:
    """Name, size and sha256 of the file as given (the .zip or .gz itself)."""
    if not path.exists():
        raise ImportFailed(path, None, "no such file")
    if path.is_dir():
        raise ImportFailed(path, None, "a folder, not a file")
    if not path.is_file():
        raise ImportFailed(path, None, "not a regular file (a device, a pipe or a socket)")
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK_B):
            digest.update(chunk)
    member = _zip_member(path) if zipfile.is_zipfile(path) else None
    return Source(path.name, path.stat().st_size, digest.hexdigest(), fmt, member)


def _zip_member(path: Path) -> str:
    with zipfile.ZipFile(path) as archive:
        names = [i.filename for i in archive.infolist() if not i.is_dir()]
    if len(names) != 1:
        raise ImportFailed(
            path, None, f"a .zip must hold exactly one file, this one holds {len(names)}"
        )
    return names[0]


@contextlib.contextmanager
def open_binary(path: Path) -> Iterator[BinaryIO]:
    """The file's bytes, decompressed where it is a .gz or a one-file .zip."""
    try:
        with path.open("rb") as probe:
            magic = probe.read(4)
        if magic[:2] == b"\x1f\x8b":
            with gzip.open(path, "rb") as f:
                yield f  # type: ignore[misc]
        elif magic == b"PK\x03\x04":
            member = _zip_member(path)
            with zipfile.ZipFile(path) as archive, archive.open(member) as f:
                yield f  # type: ignore[misc]
        else:
            with path.open("rb") as f:
                yield f
    except (OSError, zipfile.BadZipFile, EOFError) as exc:
        raise ImportFailed(path, None, f"cannot read ({exc})") from exc


@dataclass(slots=True)
class Record:
    line: int  # 1-based
    text: str
    complete: bool  # ended by a separator (False: the file's last, unterminated record)


def records(path: Path) -> Iterator[Record]:
    """The file's text records, split at ``\\n``, ``\\r`` or ``\\r\\n`` (gpu-burn separates its
    status records with ``\\r``), numbered from 1. Binary content is an error."""
    line = 0
    with open_binary(path) as f:
        pending = b""
        while True:
            try:
                chunk = f.read(CHUNK_B)
            except (OSError, zipfile.BadZipFile, EOFError) as exc:
                raise ImportFailed(path, line + 1, f"cannot read ({exc})") from exc
            if not chunk:
                break
            pieces = (pending + chunk).splitlines(keepends=True)
            # The last piece may continue in the next chunk (also a \r whose \n follows).
            pending = pieces.pop()
            if pending.endswith(b"\n"):
                pieces.append(pending)
                pending = b""
            for raw in pieces:
                line += 1
                yield Record(line, _decode(path, line, raw.rstrip(b"\r\n")), True)
            if len(pending) > MAX_RECORD_B:
                raise ImportFailed(path, line + 1, "a line longer than 64 KiB: not a text trace")
        if pending:
            line += 1
            complete = pending.endswith((b"\r", b"\n"))
            yield Record(line, _decode(path, line, pending.rstrip(b"\r\n")), complete)


def _decode(path: Path, line: int, raw: bytes) -> str:
    if b"\x00" in raw:
        raise ImportFailed(path, line, "binary data (NUL byte): not a text trace")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ImportFailed(path, line, f"not UTF-8 text ({exc.reason})") from None
