"""The equilibrium rule's clauses switched off for a whole process's analyses: what a bench
measures a clause by when the analysis it runs (an import, a replayed stop, the scenario
tests) makes its machines itself. Production code takes a ``Clauses`` value explicitly
(``detect``, ``OnlineDetector``) and keeps no switch of its own; this patches the machine's
default for the time of a ``with`` block, in this process only."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from soak.analysis.equilibrium import Clauses, Machine
from soak.profile import Windows


@contextlib.contextmanager
def clauses_off(*names: str) -> Iterator[Clauses]:
    """Inside, every machine made without clauses of its own (the analysis's ``detect``, an
    online detector) has ``names`` off; the clauses are checked (an unknown name is a
    ValueError) before anything is patched."""
    off = Clauses().without(*names)
    made = Machine.__init__

    def init(
        self: Machine,
        windows: Windows,
        load_start_s: float | None = None,
        clauses: Clauses | None = None,
    ) -> None:
        made(self, windows, load_start_s, off if clauses is None else clauses)

    Machine.__init__ = init  # type: ignore[method-assign]
    try:
        yield off
    finally:
        Machine.__init__ = made  # type: ignore[method-assign]
