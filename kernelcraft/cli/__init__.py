"""The `kernelcraft` command line.

Each layer's subcommands live in a module of this package (`engine`, `level`, `knowledge`,
`server`, `search`, `agent`), each with a `register(subparsers)` function; what they share (options, exit
codes, the event-loop runner, the JSON printer) is in `common`. This file only assembles them and
maps errors to exit codes (`common.EXIT_*`, the README's table): 0 success, 1 a negative verdict or
a failure while working, 2 unusable arguments, files, settings or database, 130 interrupted, 141
stdout closed early. Every error is one line on stderr (argparse's usage line too); with `--json` stdout
gets a JSON error object as well, and the exit code is the same as without it.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from kernelcraft.base import knobs
from kernelcraft.base.errors import KernelcraftError, StoreError, UsageError
from kernelcraft.cli.common import (
    ERROR_KINDS,
    EXIT_BROKEN_PIPE,
    EXIT_INTERRUPTED,
    EXIT_NEGATIVE,
    EXIT_OK,
    EXIT_USAGE,
    ArgumentsError,
    Parser,
    bound_numbers,
    print_error,
)


class _Version(argparse._VersionAction):
    """`--version`, looked up only when asked for (importlib.metadata is 55 ms of every start)."""

    def __call__(self, parser: argparse.ArgumentParser, *args: object) -> None:
        from kernelcraft import __version__

        print(f"kernelcraft {__version__}")
        parser.exit()


COMMAND_MODULES = {
    "verify": "engine",
    "compile": "engine",
    "profile": "engine",
    "level": "level",
    "rules": "knowledge",
    "docs": "knowledge",
    "cookbook": "cookbook",
    "serve": "server",
    "tree": "search",
    "optimize": "agent",
    "adapt": "agent",
    "report": "report",
}
"""Which module of this package registers each command (a test holds it to what they register)."""
_MODULES = ("engine", "level", "knowledge", "cookbook", "server", "search", "agent", "report")


def _command(argv: Sequence[str]) -> str | None:
    """The command `argv` names, where it names one before anything else (options aside)."""
    for arg in argv:
        if arg in ("-h", "--help", "--version"):
            return None
        if not arg.startswith("-"):
            return arg if arg in COMMAND_MODULES else None
    return None


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The whole command line; for an `argv` that names a command, only that command's module is
    imported (the others' imports are 0.1 s of a fresh `kernelcraft verify` on the H200)."""
    parser = Parser(
        prog="kernelcraft",
        description="Write fast, correct Triton kernels for PyTorch operators: an MCP server, "
        "an evaluation engine and a driver agent.",
    )
    parser.add_argument("--version", action=_Version, help="show the version and exit")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages to stderr")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    # Each layer's commands live in their own module here, imported only when needed.
    import importlib

    command = _command(argv)
    for name in (COMMAND_MODULES[command],) if command else _MODULES:
        importlib.import_module(f"kernelcraft.cli.{name}").register(sub)
    bound_numbers(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        code = _run(args, as_json="--json" in args)
        sys.stdout.flush()  # a closed pipe shows here, not at exit
    except BrokenPipeError:
        # `kernelcraft rules list | head`: the reader has all it wanted. No traceback, and no
        # second error when Python flushes stdout at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(EXIT_BROKEN_PIPE)
    sys.exit(code)


def _run(argv: list[str], *, as_json: bool) -> int:
    try:
        args = build_parser(argv).parse_args(argv)
    except ArgumentsError as refused:
        sys.stderr.write(refused.usage)
        return _failed(EXIT_USAGE, str(refused), as_json, f"{refused.prog}: error: {refused}")
    _configure_logging(args.verbose)
    as_json = bool(getattr(args, "json", False))
    try:
        # every KERNELCRAFT_* variable, parsed once, here (a bad value is one line); each command
        # takes them from `args` (`common.knobs_of`) and passes them down
        args.knobs = knobs.settings()
        return int(args.func(args) or EXIT_OK)
    except (SystemExit, BrokenPipeError):
        raise
    except BaseException as raised:
        error = _the_error(raised)
        if isinstance(error, BrokenPipeError):
            raise error from None
        if isinstance(error, KeyboardInterrupt):
            return _failed(EXIT_INTERRUPTED, "interrupted", as_json, "kernelcraft: interrupted")
        if isinstance(error, RecursionError):  # whatever layer met it: the input, never a fault of ours
            message = "an input nests too deeply to read (thousands of levels); split its expressions"
            return _failed(EXIT_USAGE, message, as_json, f"kernelcraft: error: {message}")
        if isinstance(error, KernelcraftError):
            # an unusable database is an unusable file, as `serve` says before it starts
            code = EXIT_USAGE if isinstance(error, UsageError | StoreError) else EXIT_NEGATIVE
            return _failed(code, str(error), as_json, f"kernelcraft: error: {error}")
        if as_json:  # a fault of ours: the traceback follows on stderr
            print_error("internal", f"{type(raised).__name__}: {raised}", EXIT_NEGATIVE)
        raise


def _failed(code: int, message: str, as_json: bool, line: str) -> int:
    """Report a failure: `line` on stderr; with `--json`, the error object on stdout too."""
    print(line, file=sys.stderr)
    if as_json:
        print_error(ERROR_KINDS[code], message, code)
    return code


def _the_error(e: BaseException) -> BaseException:
    """The error to report: `e`, or the one that matters inside (nested) exception groups (a task
    group's failure): an interrupt, a closed pipe, then one of ours; else `e` itself."""
    leaves: list[BaseException] = []
    stack = [e]
    while stack:
        x = stack.pop()
        inner = getattr(x, "exceptions", None)
        if isinstance(inner, tuple) and isinstance(x, BaseException) and inner:
            stack.extend(reversed(inner))
        else:
            leaves.append(x)
    for kind in (KeyboardInterrupt, BrokenPipeError, KernelcraftError, RecursionError):
        found = [x for x in leaves if isinstance(x, kind)]
        if found:
            return found[0]
    return e


def _configure_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not verbose:  # the HTTP clients (LLM APIs, --server) log every request at INFO
        for name in ("httpx", "httpx2"):
            logging.getLogger(name).setLevel(logging.WARNING)
