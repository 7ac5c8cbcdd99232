"""The ``soak`` command: parsing and dispatch only. Each subcommand's parser and handler live
in a module of their own (``run``, ``reports``, ``importing``, ``fleet``); ``args`` holds what
they share.

Exit codes (README.md): 0 PASS, 1 FAIL, 2 usage or configuration error, 3 the run could not
complete (INCOMPLETE). Bad input is one line on stderr naming what is wrong, and creates
nothing.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from soak import __version__
from soak.cli import fleet, importing, reports, run
from soak.cli.args import EXIT_INCOMPLETE, EXIT_USAGE, Parser
from soak.cli.streams import guarded
from soak.errors import BackendUnavailable, ConfigError, SoakError, StoreError


def _parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="soak",
        description="Burn-in soak benchmark for GPU servers: loads every GPU at once, detects "
        "thermal equilibrium, and writes an acceptance report comparing cold and steady state.",
        epilog="exit codes: 0 PASS, 1 FAIL, 2 bad input or configuration, 3 run incomplete",
    )
    parser.add_argument("--version", action="version", version=f"soak {__version__}")
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="log more, on stderr (default: warnings only)"
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    run.add_parser(sub)
    reports.add_report_parser(sub)
    reports.add_compare_parser(sub)
    importing.add_parser(sub)
    reports.add_devices_parser(sub)
    fleet.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; its exit code is its outcome's whatever becomes of stdout and
    stderr (``streams``: a reader that closes early never changes it)."""
    with guarded():
        return _main(list(sys.argv[1:] if argv is None else argv))


def _main(argv: list[str]) -> int:
    try:
        args = _parser().parse_args(argv)
    except ConfigError as exc:
        _error(exc)
        return EXIT_USAGE
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="soak: %(levelname)s: %(name)s: %(message)s",
    )
    try:
        return args.handler(args, argv)
    except (ConfigError, BackendUnavailable) as exc:
        _error(exc)
        return EXIT_USAGE
    except StoreError as exc:
        _error(exc)
        return EXIT_USAGE if args.command != "run" else EXIT_INCOMPLETE
    except SoakError as exc:
        _error(exc)
        return EXIT_INCOMPLETE
    except KeyboardInterrupt:  # a second Ctrl-C: the runner has closed the store
        print("soak: interrupted", file=sys.stderr)
        return EXIT_INCOMPLETE
    except Exception as exc:  # a bug: its traceback for the report, and never exit 1 (FAIL)
        import traceback

        traceback.print_exc()
        _error(SoakError(f"internal error: {type(exc).__name__}: {exc}"))
        return EXIT_INCOMPLETE


def _error(exc: BaseException) -> None:
    """One line on stderr, whatever the message holds: control characters in what the
    operator typed (a newline, a carriage return) are shown escaped."""
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(exc))
    print(f"soak: error: {text}", file=sys.stderr)
