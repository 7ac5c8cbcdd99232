"""What each clause of the equilibrium rule pays on the simulator: the pytest files named
after ``--`` (the equilibrium scenario tests, say) run with every clause on, then with each
clause off in turn (``testkit.clauses.clauses_off``, in this process), and the
tests that fail without it listed. ``bench/real_traces.py --without CLAUSE`` is the same on
real data.

``python bench/clause_scenarios.py [CLAUSE ...] -- PYTEST ARGS`` (default: every clause), e.g.
``-- tests/scenarios/test_equilibrium_truth.py``. The tests are named on the command line, not
here: the bench does not reach into the test tree itself.
Prints a table and one JSON line.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from soak.analysis.equilibrium import CLAUSE_NAMES  # noqa: E402
from testkit.clauses import clauses_off  # noqa: E402


class Outcomes:
    """A pytest plugin that keeps each test's outcome."""

    def __init__(self) -> None:
        self.failed: list[str] = []
        self.passed = 0

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call" and report.failed:
            self.failed.append(report.nodeid.split("::", 1)[-1])
        elif report.when == "call" and report.passed:
            self.passed += 1


def run(off: tuple[str, ...], args: list[str]) -> Outcomes:
    outcomes = Outcomes()
    with clauses_off(*off):
        pytest.main(["-q", "-p", "no:cacheprovider", "-p", "no:xdist", *args], [outcomes])
    return outcomes


def main() -> int:
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    names, args = argv[:split] or list(CLAUSE_NAMES), argv[split + 1 :]
    if not args:
        print("name the pytest files to run after --, e.g. -- tests/scenarios/", file=sys.stderr)
        return 2
    unknown = sorted(set(names) - set(CLAUSE_NAMES))
    if unknown:
        print(
            f"no clause named {', '.join(unknown)} (clauses: {', '.join(CLAUSE_NAMES)})",
            file=sys.stderr,
        )
        return 2
    results = {"all on": run((), args)}
    for name in names:
        results[f"{name} off"] = run((name,), args)
    print(f"\n{'clauses':>16} {'passed':>7} {'failed':>7}  tests failed")
    for label, r in results.items():
        print(f"{label:>16} {r.passed:>7} {len(r.failed):>7}  {', '.join(r.failed)}")
    out = {k: {"passed": r.passed, "failed": r.failed} for k, r in results.items()}
    print(json.dumps({"bench": "clause_scenarios", "tests": args, "results": out}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
