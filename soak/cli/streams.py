"""stdout and stderr that can never change a command's exit code.

A script pipes soak's output anywhere (``| head -3``, a ``tee`` that dies, a closed
terminal): once the reader is gone, every write to that stream fails (EPIPE). Unguarded,
the first failing ``print`` raises out of the command, and the exit code is 1 (or 120 when
only the interpreter's last flush fails) whatever the verdict was. Guarded, the stream's
output is dropped from then on and the command goes on: a soak still runs, writes its report
and exits with its verdict's code.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Iterator
from typing import Any, TextIO


class Guarded:
    """A text stream whose writes and flushes never raise: the first that fails (the reader
    has gone, the stream was closed, the disk it goes to is full) drops everything after it.
    Everything else (``isatty``, ``fileno``, ``encoding``) is the stream's own."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.lost = False

    def write(self, text: str) -> int:
        if not self.lost:
            try:
                self.stream.write(text)
            except (OSError, ValueError):  # ValueError: written after it was closed
                self._lose()
        return len(text)

    def flush(self) -> None:
        if not self.lost:
            try:
                self.stream.flush()
            except (OSError, ValueError):
                self._lose()

    def _lose(self) -> None:
        """Stop writing, and point the stream's descriptor at /dev/null: the interpreter
        flushes the stream once more at exit, and what is left in its buffer must find a
        place to go rather than fail again (exit 120) after the command's code is set."""
        self.lost = True
        with contextlib.suppress(OSError, ValueError, io.UnsupportedOperation):
            fd = self.stream.fileno()
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, fd)
            finally:
                os.close(devnull)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


@contextlib.contextmanager
def guarded() -> Iterator[None]:
    """``sys.stdout`` and ``sys.stderr`` guarded for the block, flushed at its end (where a
    reader that left is found at the latest), and given back as they were."""
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = Guarded(out), Guarded(err)  # type: ignore[assignment]
    try:
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        sys.stdout, sys.stderr = out, err
