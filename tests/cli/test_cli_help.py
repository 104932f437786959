"""`kernelcraft … --help` shows each option's default, and only defaults that say something."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import pytest

from kernelcraft.cli import build_parser, main


def help_page(capsys: pytest.CaptureFixture[str], *command: str) -> str:
    """The help of `command`, unwrapped onto one line (argparse wraps to the terminal's width)."""
    with pytest.raises(SystemExit) as exited:
        main([*command, "--help"])
    assert exited.value.code == 0
    return " ".join(capsys.readouterr().out.split())


def every_parser(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from every_parser(sub)


def test_verify_help_shows_the_default_trials_and_timeout(capsys: pytest.CaptureFixture[str]) -> None:
    page = help_page(capsys, "verify")
    assert "trials per input set (default: 5)" in page
    assert "deadline in seconds (default: 120.0)" in page  # the MCP tools' default too (base/knobs.py)


def test_a_nested_command_shows_its_defaults_too(capsys: pytest.CaptureFixture[str]) -> None:
    page = help_page(capsys, "tree", "start")
    assert "search policy (default: adaexplore)" in page
    assert "candidates to evaluate (default: 50)" in page


def test_serve_help_shows_the_transport_host_and_port_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    page = help_page(capsys, "serve")
    assert "(default: stdio)" in page and "(default: 127.0.0.1)" in page and "(default: 8765)" in page


def test_no_help_page_prints_a_default_that_says_nothing() -> None:
    pages = [p.format_help() for p in every_parser(build_parser())]
    assert len(pages) > 15  # every command and action, not only the top page
    for empty in ("(default: None)", "(default: False)", "(default: [])", "(default: ==SUPPRESS==)"):
        assert not [page for page in pages if empty in page], empty


def test_a_command_imports_only_the_module_that_registers_it_and_a_tree_command_no_mcp() -> None:
    """`kernelcraft verify` builds only its own command's parser; the `tree` commands open the
    server's state without the MCP SDK (importing it cost a `tree status` about 2 s of 3.5 s)."""
    import importlib
    import subprocess
    import sys

    from kernelcraft.cli import COMMAND_MODULES, common

    registered = {}
    for name in set(COMMAND_MODULES.values()):
        parser = common.Parser(prog="kernelcraft")
        sub = parser.add_subparsers(dest="command")
        importlib.import_module(f"kernelcraft.cli.{name}").register(sub)
        registered.update(dict.fromkeys(sub.choices, name))
    assert registered == COMMAND_MODULES  # every command, by the module that registers it
    full = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert set(full.choices) == set(COMMAND_MODULES)
    # a fresh `kernelcraft verify ...` parses its arguments without importing the other commands
    probe = (
        "import sys; from kernelcraft.cli import build_parser; "
        "build_parser(['-v', 'verify', 't.py', 'c.py']).parse_args(['-v', 'verify', 't.py', 'c.py']); "
        "print(sorted(m for m in sys.modules if m.startswith('kernelcraft.cli.'))); "
        "import kernelcraft.cli.search, kernelcraft.server.state; print('mcp' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    modules, mcp = out.stdout.split("\n")[:2]
    assert modules == "['kernelcraft.cli.common', 'kernelcraft.cli.engine', 'kernelcraft.cli.progress']"
    assert mcp == "False", (
        "the tree commands import the MCP SDK again (kernelcraft/server/state.py's imports)"
    )
