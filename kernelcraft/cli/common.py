"""What every `kernelcraft` command shares: exit codes, the common options, one event-loop runner
and one printer.

A command module adds `--db`, `--json` and the hidden `--device` through the adders here, so
that they read the same in every command; runs its coroutine with `run`; and prints its result
with `emit` (JSON or text) or `print_json`, so that `--json` prints the pydantic model the MCP
tools return. Help pages show each option's default (`Parser`).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn, TypeAlias, TypeVar

import anyio
from pydantic import BaseModel

from kernelcraft.base.errors import UsageError
from kernelcraft.base.knobs import TIMEOUT_S, TRIALS, JobKnob, Knobs

T = TypeVar("T")

# The exit codes of every command (the README's table). `--json` changes what goes to stdout,
# never the code: a failure prints `{"error": {"kind": ..., "message": ..., "exit_code": ...}}`.
EXIT_OK = 0  # success; a correct candidate
EXIT_NEGATIVE = 1  # a negative verdict (not correct, not compiled, crashed or timed out), or a
# failure while working (an LLM or server that refused, an unusable database, a fault of ours)
EXIT_USAGE = 2  # unusable arguments, files, settings or database (argparse's code for bad arguments too)
EXIT_INTERRUPTED = 130  # Ctrl-C: 128 + SIGINT, as shells report it
EXIT_BROKEN_PIPE = 141  # stdout closed early (`| head`): 128 + SIGPIPE, as shells report it

ERROR_KINDS = {EXIT_USAGE: "usage", EXIT_NEGATIVE: "error", EXIT_INTERRUPTED: "interrupted"}


class ArgumentsError(Exception):
    """argparse refused the command line (raised by `Parser.error` instead of exiting, so that
    `main` reports it as any other usage error, in JSON under `--json`)."""

    def __init__(self, prog: str, message: str, usage: str) -> None:
        super().__init__(message)
        self.prog = prog
        self.usage = usage


DB_FALLBACK = "$KERNELCRAFT_DB or $KERNELCRAFT_HOME/kernelcraft.db"


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Appends "(default: X)" to an option's help, except where X says nothing (None, False, [])."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False or action.default == []:
            return action.help
        return super()._get_help_string(action)


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose help shows defaults. `add_subparsers` makes its subcommands with
    `type(self)`, so every subcommand's help shows them too."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", DefaultsHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise ArgumentsError(self.prog, message, self.format_usage())


MAX_INT64 = 2**63 - 1


def whole_number(text: str) -> int:
    """argparse type of every whole number the command line takes: it fits SQLite's 64-bit integer
    (an id of 10^23 was an OverflowError deep in the database)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not -MAX_INT64 - 1 <= value <= MAX_INT64:
        raise argparse.ArgumentTypeError(f"{text} is out of range: give a whole number within ±{MAX_INT64}")
    return value


def finite_number(text: str) -> float:
    """argparse type of every other number: finite (nan and inf say nothing a flag can mean)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text} is not a finite number")
    return value


def user_path(text: str) -> Path:
    """argparse type of every path: one the operating system can name (no NUL byte)."""
    if "\0" in text:
        raise argparse.ArgumentTypeError("a path cannot hold a NUL byte")
    if len(os.fsencode(text)) > 4096 or any(len(os.fsencode(part)) > 255 for part in Path(text).parts):
        raise argparse.ArgumentTypeError("the path is too long (a name over 255 bytes, or 4096 in all)")
    return Path(text)


def bound_numbers(parser: argparse.ArgumentParser) -> None:
    """Give every `int`, `float` and `Path` argument of `parser` and its subcommands the types above
    (the class of bad numbers and paths, whatever command takes them)."""
    swap: dict[Any, Any] = {int: whole_number, float: finite_number, Path: user_path}
    for action in parser._actions:
        if action.type in swap:
            action.type = swap[action.type]
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                bound_numbers(sub)


# What each command module's `register` receives, and what the adders add to (a parser or an
# argument group). Typeshed makes the first generic; at run time it is not, hence the strings.
Subcommands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
Options: TypeAlias = "argparse._ActionsContainer"


def knobs_of(args: argparse.Namespace) -> Knobs:
    """The settings `main` read once for this command (`base/knobs.py`), to pass down."""
    given = getattr(args, "knobs", None)
    if not isinstance(given, Knobs):
        raise TypeError("a command's arguments carry the settings `kernelcraft.cli.main` read (args.knobs)")
    return given


def add_db(p: Options, what: str = "database file") -> None:
    """`--db PATH`: the database a command opens; without it, the settings' (`Settings.from_knobs`)."""
    p.add_argument("--db", type=Path, default=None, help=f"{what} (default: {DB_FALLBACK})")


def add_json(p: Options, what: str = "the result as one JSON object") -> None:
    """`--json`: print the result for a program to read instead of the human summary."""
    p.add_argument("--json", action="store_true", help=f"print {what} on stdout")


def add_device(p: Options) -> None:
    """The hidden `--device auto|cuda|cpu` of the commands that evaluate candidates (tests force cpu)."""
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto", help=argparse.SUPPRESS)


def add_evaluator(p: Options) -> None:
    """`--evaluator local|ray` and `--ray-address`: where the server evaluates candidates."""
    p.add_argument(
        "--evaluator",
        choices=("local", "ray"),
        default="local",
        help="where candidates are evaluated: this machine's GPUs, or a Ray cluster's (pip install "
        "'kernelcraft[ray]'; one actor per GPU)",
    )
    p.add_argument(
        "--ray-address",
        metavar="ADDR",
        default=None,
        help="with --evaluator ray: 'auto' (the cluster `ray start` runs here) or ray://HOST:PORT; "
        "default: a one-machine cluster started for this process",
    )


def check_evaluator_args(evaluator: str, ray_address: str | None) -> None:
    """Refuse, before anything starts, a Ray address without the Ray evaluator, and the Ray
    evaluator without Ray installed."""
    if ray_address and evaluator != "ray":
        raise UsageError("--ray-address applies to the Ray evaluator: add --evaluator ray")
    if evaluator == "ray" and importlib.util.find_spec("ray") is None:
        raise UsageError("--evaluator ray needs Ray: pip install 'kernelcraft[ray]'")


def _gigabytes(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of GB: {text!r}") from None
    if not 0 < value < 1e6:
        raise argparse.ArgumentTypeError(f"must be a positive number of GB, not {text}")
    return value


def add_memory_limit(p: Options) -> None:
    """`--memory-limit-gb GB`: a cap on each candidate process (default: sized to its task)."""
    p.add_argument(
        "--memory-limit-gb",
        type=_gigabytes,
        default=None,
        metavar="GB",
        help="cap each candidate's memory at GB (default: sized to the task's inputs, outputs and "
        "parameters; a task that cannot fit the device is refused up front)",
    )


def run(main: Callable[[], Awaitable[T]]) -> T:
    """Run `main()` on a fresh event loop and return its result: on uvloop (the event loop in C)
    where it is installed (not on Windows), else on asyncio's own loop."""
    use_uvloop = importlib.util.find_spec("uvloop") is not None
    return anyio.run(main, backend_options={"use_uvloop": use_uvloop})


def print_json(result: BaseModel | Sequence[BaseModel] | Mapping[str, Any]) -> None:
    """A model as one line of JSON (as the MCP tools return it); a list of models or a plain
    mapping as indented JSON."""
    if isinstance(result, BaseModel):
        print(result.model_dump_json())
    elif isinstance(result, Mapping):
        print(json.dumps(result, indent=2))
    else:
        print(json.dumps([m.model_dump(mode="json") for m in result], indent=2))


def emit(result: BaseModel | Sequence[BaseModel], as_json: bool, text: str | Callable[[], None]) -> None:
    """Print `result` as JSON (`--json`), else its human rendering: `text`, or what `text()` prints."""
    if as_json:
        print_json(result)
    elif isinstance(text, str):
        print(text)
    else:
        text()


def print_error(kind: str, message: str, exit_code: int) -> None:
    """`--json`'s answer on a failure: one JSON object on stdout, for a program to read."""
    print(json.dumps({"error": {"kind": kind, "message": message, "exit_code": exit_code}}))


def seconds(text: str) -> float:
    """argparse type of a deadline: a job's `timeout_s` within its bounds (`base/knobs.py`)."""
    return TIMEOUT_S.arg_type(text)


def within(knob: JobKnob, value: float, flag: str) -> None:
    """A `UsageError` naming `flag` when `value` is out of the knob's bounds (`base/knobs.py`)."""
    try:
        knob.check(value)
    except ValueError:
        raise UsageError(f"{flag} must be in {knob.bounds_words()}, not {value:g}") from None


def check_trials(value: int) -> None:
    within(TRIALS, value, "--trials")
