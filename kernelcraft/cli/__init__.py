"""The `kernelcraft` command line.

Each layer's subcommands live in a module of this package (`engine`, `knowledge`, `server`,
`search`, `agent`), each with a `register(subparsers)` function; what they share (options, exit
codes, the event-loop runner, the JSON printer) is in `common`. This file only assembles them and
maps errors to exit codes: 0 success, 1 a negative verdict (a candidate that is not correct),
2 unusable arguments or files, 130 interrupted.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from kernelcraft import __version__
from kernelcraft.base.errors import KernelcraftError, UsageError
from kernelcraft.cli.common import EXIT_INTERRUPTED, EXIT_NEGATIVE, EXIT_OK, EXIT_USAGE, Parser


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="kernelcraft",
        description="Write fast, correct Triton kernels for PyTorch operators: an MCP server, "
        "an evaluation engine and a driver agent.",
    )
    parser.add_argument("--version", action="version", version=f"kernelcraft {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages to stderr")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    # Each layer's commands live in their own module here. Imported inside the function so that
    # `kernelcraft --help` stays fast.
    from kernelcraft.cli import agent, engine, knowledge, report, search, server

    for module in (engine, knowledge, server, search, agent, report):
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not args.verbose:  # the HTTP clients (LLM APIs, --server) log every request at INFO
        for name in ("httpx", "httpx2"):
            logging.getLogger(name).setLevel(logging.WARNING)
    try:
        code = args.func(args)
    except UsageError as e:
        print(f"kernelcraft: error: {e}", file=sys.stderr)
        sys.exit(EXIT_USAGE)
    except KernelcraftError as e:
        print(f"kernelcraft: error: {e}", file=sys.stderr)
        sys.exit(EXIT_NEGATIVE)
    except KeyboardInterrupt:
        print("kernelcraft: interrupted", file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)
    sys.exit(code or EXIT_OK)
