"""The command line's interface — every command, option, default and choice — against a snapshot.

Restructuring the code must not change what a user types. When a change to the interface is
intended, regenerate the snapshot: `python tests/cli/test_cli_snapshot.py > tests/snapshots/cli.json`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from kernelcraft.cli import build_parser

SNAPSHOT = Path(__file__).resolve().parents[1] / "snapshots" / "cli.json"


def shape(parser: argparse.ArgumentParser) -> dict[str, Any]:
    """Each command's options (flags, destination, default, choices, arity) and its subcommands."""
    out: dict[str, Any] = {"options": [], "commands": {}}
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, sub in sorted(a.choices.items()):
                out["commands"][name] = shape(sub)
            continue
        if isinstance(a, (argparse._HelpAction, argparse._VersionAction)):
            continue
        plain = isinstance(a.default, (str, int, float, bool, type(None), list))
        out["options"].append(
            {
                "flags": list(a.option_strings),
                "dest": a.dest,
                "default": a.default if plain else repr(a.default),
                "choices": list(a.choices) if a.choices else None,
                "nargs": a.nargs,
                "required": a.required,
                "kind": type(a).__name__,
            }
        )
    return out


def current() -> str:
    return json.dumps(shape(build_parser()), indent=1, sort_keys=True, default=str)


def test_the_command_line_matches_its_snapshot():
    assert json.loads(current()) == json.loads(SNAPSHOT.read_text())


if __name__ == "__main__":
    print(current(), end="")
