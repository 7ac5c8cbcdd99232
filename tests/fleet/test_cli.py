"""The `soak fleet` command line: every option says what it is and its default."""

from __future__ import annotations

import argparse

import pytest

from soak.cli import _parser


def _fleet_verbs() -> dict[str, argparse.ArgumentParser]:
    top = _parser()
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    fleet = sub.choices["fleet"]
    verbs = next(a for a in fleet._actions if isinstance(a, argparse._SubParsersAction))
    return dict(verbs.choices)


@pytest.mark.parametrize("verb", ["sbatch", "report", "history"])
def test_every_fleet_option_has_help_with_its_default(verb):
    for action in _fleet_verbs()[verb]._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        assert action.help, f"{verb} {action.dest}: no help"
        default = action.default
        if default not in (None, False, []) and action.option_strings:
            assert "default" in action.help, f"{verb} {action.option_strings}: no default"
