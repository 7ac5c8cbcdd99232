"""What every subcommand's parser shares: the exit codes, the parser that raises instead of
exiting (with a did-you-mean for a misspelt option), the argument types that give one-line
errors, and the verdict lines."""

from __future__ import annotations

import argparse
import difflib
import math
from collections.abc import Sequence

from soak.errors import ConfigError
from soak.model import Verdict
from soak.profile import DESIGN_INLET_RANGE_C, check_design_inlet

EXIT_PASS, EXIT_FAIL, EXIT_USAGE, EXIT_INCOMPLETE = 0, 1, 2, 3
VERDICT_EXIT = {
    Verdict.PASS: EXIT_PASS,
    Verdict.FAIL: EXIT_FAIL,
    Verdict.INCOMPLETE: EXIT_INCOMPLETE,
}


class Parser(argparse.ArgumentParser):
    """argparse that raises instead of printing usage and exiting, and suggests the option
    meant for a misspelt one."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise ConfigError(message)

    def parse_args(self, args=None, namespace=None):  # type: ignore[override]
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            raise ConfigError(unrecognized(self, parsed, extras))
        return parsed


def unrecognized(parser: argparse.ArgumentParser, parsed, extras: Sequence[str]) -> str:
    """ "unrecognized argument --minuets: did you mean --minutes?", from the options of the
    (sub)command that was parsed."""
    options = list(parser._option_string_actions)
    found = True
    while found:
        found = False
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                chosen = action.choices.get(getattr(parsed, action.dest, None) or "")
                if chosen is not None:
                    parser, found = chosen, True
                    options += list(chosen._option_string_actions)
                break
    words = []
    for extra in extras:
        close = []
        if extra.startswith("--"):
            close = difflib.get_close_matches(extra.split("=", 1)[0], options, n=1, cutoff=0.6)
        words.append(f"{extra} (did you mean {close[0]}?)" if close else extra)
    plural = "s" if len(extras) > 1 else ""
    return f"unrecognized argument{plural}: {' '.join(words)}"


def positive(name: str, cast: type = float, allow_zero: bool = False):
    def parse(text: str) -> float:
        try:
            value = cast(text)
        except ValueError:
            raise ConfigError(f"{name}: {text!r} is not a number") from None
        if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
            raise ConfigError(f"{name}: must be {'>= 0' if allow_zero else '> 0'}, got {text}")
        return value

    return parse


def device_list(text: str) -> tuple[int, ...]:
    try:
        indices = tuple(int(part) for part in text.split(",") if part.strip() != "")
    except ValueError:
        raise ConfigError(f"--devices: {text!r} is not a comma-separated list of indices") from None
    if not indices or any(i < 0 for i in indices) or len(set(indices)) != len(indices):
        raise ConfigError(f"--devices: {text!r} must list distinct indices >= 0")
    return indices


def tag(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--tag: {text!r} is not KEY=VALUE")
    return key.strip(), value


def workload_option(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ConfigError(f"--option: {text!r} is not KEY=VALUE")
    return key, value


def subcommand(sub, name: str, summary: str, description: str, examples: Sequence[str]):
    """A subcommand with its one-line summary, a paragraph, and examples in its epilog."""
    epilog = "examples:\n" + "\n".join(f"  {e}" for e in examples)
    return sub.add_parser(
        name,
        help=summary,
        description=description,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def port(name: str):
    def parse(text: str) -> int:
        try:
            number = int(text)
        except ValueError:
            raise ConfigError(f"{name}: {text!r} is not a port number") from None
        if not 0 <= number <= 65535:
            raise ConfigError(f"{name}: {number} is not in 0..65535")
        return number

    return parse


def design_inlet(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"--design-inlet: {text!r} is not a temperature in °C") from None
    return check_design_inlet(value, "--design-inlet")


def add_design_inlet(parser: argparse.ArgumentParser) -> None:
    """``--design-inlet C``, shared by ``soak run`` and ``soak report``."""
    low, high = DESIGN_INLET_RANGE_C
    parser.add_argument(
        "--design-inlet",
        type=design_inlet,
        metavar="C",
        help=f"inlet temperature in °C, {low:.0f} to {high:.0f}, each device's thermal "
        "headroom is projected to (default: the profile's design_inlet_c, 35 °C in the "
        "built-in ones: ASHRAE A2 allowable)",
    )


def print_verdict(analysis) -> None:
    """The reasons, then the verdict: with the report path after it, the last two lines.
    A reason that says the same of several devices is one line naming them all; a verdict
    that could not be judged says why in its own line."""
    from soak.analysis.analyze import merge_windows
    from soak.analysis.checks import CheckName, Status
    from soak.units import plural

    devices, stop = len(analysis.devices), analysis.stop_reason
    line = f"verdict: {analysis.verdict} ({plural(devices, 'device')}, stop: {stop})"
    # where every device could not be judged for the same reason, the verdict line says it
    short = [
        c
        for c in analysis.reasons
        if c.check is CheckName.RUN_LENGTH and c.status is Status.INCOMPLETE
    ]
    messages = {c.message for c in short}
    told = messages.pop() if devices and len(short) == devices and len(messages) == 1 else ""
    if told:
        line += f": {told}"
    grouped: dict[tuple[str, str, str], list[int | None]] = {}
    for reason in merge_windows(analysis.reasons):
        if reason.message == told:
            continue
        key = (str(reason.status), str(reason.check), reason.message)
        grouped.setdefault(key, []).append(reason.device)
    for (status, check, message), where in grouped.items():
        print(f"  {status.upper():4}  {_where(where)}: {check}: {message}")
    print(line)


def _where(devices: Sequence[int | None]) -> str:
    """ "server", "device 3", "devices 0–7", "devices 1, 4, 6"."""
    if devices == [None]:
        return "server"
    numbers = sorted(d for d in devices if d is not None)
    if len(numbers) == 1:
        return f"device {numbers[0]}"
    run = numbers == list(range(numbers[0], numbers[-1] + 1))
    listed = (
        f"{numbers[0]}–{numbers[-1]}"
        if run and len(numbers) > 2
        else ", ".join(str(n) for n in numbers)
    )
    return f"devices {listed}"
