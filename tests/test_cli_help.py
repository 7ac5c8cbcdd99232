"""`soak --help` explains itself: every option of every subcommand has a help text, each
subcommand a description and two examples; `soak --version` answers."""

from __future__ import annotations

import argparse

import pytest

from soak import __version__
from soak.cli import _parser, main


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """Every subcommand, nested ones too (``fleet report``), by its full name."""
    found = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                full = f"{parser.prog} {name}".removeprefix("soak ")
                found[full] = sub
                found.update({f"{name} {k}": v for k, v in subcommands(sub).items()})
    return found


def test_every_option_of_every_subcommand_has_a_help_text() -> None:
    missing = []
    parsers = {"soak": _parser(), **subcommands(_parser())}
    for name, parser in parsers.items():
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                continue
            if not action.help or action.help == argparse.SUPPRESS:
                missing.append(f"{name}: {'/'.join(action.option_strings) or action.dest}")
    assert not missing, "options without help: " + ", ".join(missing)


def test_every_option_says_its_default_or_that_it_is_required() -> None:
    silent = []
    parsers = {"soak": _parser(), **subcommands(_parser())}
    for name, parser in parsers.items():
        for action in parser._actions:
            skip = (argparse._SubParsersAction, argparse._HelpAction, argparse._VersionAction)
            if isinstance(action, skip) or not action.option_strings:
                continue
            text = action.help or ""
            if "default" not in text and not (action.required or "(required)" in text):
                silent.append(f"{name}: {'/'.join(action.option_strings)}")
    assert not silent, "options that do not say their default: " + ", ".join(silent)


def test_every_subcommand_has_a_description_and_two_examples() -> None:
    for name, parser in subcommands(_parser()).items():
        if any(isinstance(a, argparse._SubParsersAction) for a in parser._actions):
            continue  # a group of subcommands: its leaves carry the examples
        assert parser.description and len(parser.description) > 40, name
        examples = (parser.epilog or "").split("examples:")[-1].strip().splitlines()
        assert len(examples) >= 2 and all(e.strip().startswith("soak ") for e in examples), name


def test_run_help_gives_units_and_defaults(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--hours H soak length in hours, after the idle baseline (default 2;" in text
    assert "--interval S telemetry sample interval in seconds (default 1)" in text
    assert "--seed N random seed" in text
    assert "0 picks a free port and prints it" in text


def test_version(capsys) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"soak {__version__}"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--metrics-port", "70000"], "soak: error: --metrics-port: 70000 is not in 0..65535"),
        (["--metrics-port", "http"], "soak: error: --metrics-port: 'http' is not a port number"),
    ],
)
def test_a_bad_metrics_port_is_refused_before_anything_starts(capsys, tmp_path, args, message):
    code = main(["run", "--backend", "sim", "--out", str(tmp_path / "r"), *args])
    assert code == 2
    assert capsys.readouterr().err.strip() == message
    assert not (tmp_path / "r").exists()


def test_a_metrics_port_in_use_is_refused_before_the_soak_starts(capsys, tmp_path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = main(
            ["run", "--backend", "sim", "--out", str(tmp_path / "r"), "--metrics-port", str(port)]
        )
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"soak: error: --metrics-port {port}: cannot listen on 127.0.0.1:")
    assert "\n" not in err
    assert not (tmp_path / "r").exists()
