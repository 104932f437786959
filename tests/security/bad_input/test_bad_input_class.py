"""Bad input is one clear line or a bounded wait, never a traceback or a hang, as a class (issue 39
item 4): hypothesis draws hostile values for the arguments of every command of the CLI (read
from argparse) and of every MCP tool (read from tools/list), so a command or tool added later is
covered without a line here. The values are the kinds that reached tracebacks or hangs: ids of
10^23, nan and inf, paths that are devices, FIFOs or directories, a 300,000-deep expression, huge
and empty strings."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernelcraft.base import knobs
from kernelcraft.cli import build_parser, main

DEEP = (
    "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return "
    + "+".join(["x"] * 300_000)
    + "\n"
)
NUMBERS = ["100000000000000000000000", "-100000000000000000000000", "-1", "0", "nan", "inf", "1e309"]
STRINGS = ["", "x" * 5000, "'; DROP TABLE rules; --", "\u202e", "a=b", "1-1000000000000000000000"]
WAIT_S = 30  # a bounded wait: anything longer is a hang


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    base = tmp_path_factory.mktemp("hostile")
    fifo = base / "fifo"
    os.mkfifo(fifo)
    (base / "deep.py").write_text(DEEP)
    (base / "binary.py").write_bytes(b"\xff\xfe\x00garbage")
    return {
        "fifo": str(fifo),
        "dir": str(base),
        "missing": str(base / "missing" / "file.py"),
        "deep": str(base / "deep.py"),
        "binary": str(base / "binary.py"),
        "zero": "/dev/zero",
    }


@contextlib.contextmanager
def bounded(seconds: int) -> Iterator[None]:
    def hung(_signum: int, _frame: Any) -> None:
        raise TimeoutError(f"no answer within {seconds} s: a hang")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def leaves(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield path, parser
        return
    for name, sub in subs[0].choices.items():
        yield from leaves(sub, (*path, name))


COMMANDS = sorted(leaves(build_parser()), key=lambda c: c[0])
# `serve` with arguments it accepts serves until it is stopped: its draws come with a port it refuses.
RUNS_UNTIL_STOPPED = {("serve",)}


def takes_value(action: argparse.Action) -> bool:
    return action.option_strings != [] and action.nargs != 0 and not isinstance(action, argparse._HelpAction)


def values(hostile: dict[str, str]) -> st.SearchStrategy[str]:
    return st.sampled_from([*NUMBERS, *STRINGS, *hostile.values()])


@pytest.mark.slow
@pytest.mark.parametrize("command", [c for c, _ in COMMANDS], ids=" ".join)
def test_every_command_answers_hostile_arguments_with_one_line_and_an_exit_code(
    command: tuple[str, ...],
    hostile: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    parser = dict(COMMANDS)[command]
    positionals = [a for a in parser._actions if not a.option_strings and a.nargs not in (0, "?", "*")]
    options = [a for a in parser._actions if takes_value(a)]
    monkeypatch.chdir(tmp_path)  # a value taken as a file to write lands here, not in the repository
    monkeypatch.setenv("KERNELCRAFT_HOME", str(tmp_path / "home"))
    for key in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "KERNELCRAFT_DB", "KERNELCRAFT_TOKENS"):
        monkeypatch.delenv(key, raising=False)
    db = ["--db", str(tmp_path / "kc.db")] if any("--db" in a.option_strings for a in options) else []

    @settings(
        max_examples=20,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        database=None,
        derandomize=True,
    )
    @given(st.data())
    def run(data: st.DataObject) -> None:
        argv = [*command, *(data.draw(values(hostile)) for _ in positionals)]
        if options and (command in RUNS_UNTIL_STOPPED or data.draw(st.booleans())):
            option = data.draw(st.sampled_from(options))
            argv[len(command) : len(command)] = [option.option_strings[-1], data.draw(values(hostile))]
        argv += db if "--db" not in argv else []
        if command in RUNS_UNTIL_STOPPED and "--port" not in argv:
            argv += ["--port", NUMBERS[0]]  # with good arguments it would serve until stopped
        with bounded(WAIT_S), pytest.raises(SystemExit) as done:
            main(argv)
        out, err = capsys.readouterr()
        assert "Traceback" not in err and "Traceback" not in out, (argv, err[-2000:])
        assert done.value.code in (0, 1, 2, None), (argv, done.value.code, err[-500:])
        if done.value.code == 2:
            said = [line for line in err.splitlines() if "error:" in line]
            assert len(said) == 1, (argv, err[-1000:])

    run()


# ------------------------------------------------------------------------------------------- MCP


def json_values(kind: str, hostile: dict[str, str]) -> list[Any]:
    if kind == "integer":
        return [10**23, -(10**23), -1, 0, 2**63]
    if kind == "number":
        return [1e308, -1.0, 0.0]
    if kind == "boolean":
        return [True, False]
    if kind == "array":
        return [["x"] * 2000, [], [DEEP]]
    if kind == "object":
        return [{"x": DEEP}, {}]
    return [DEEP, "", "x" * 200_000, "\x00", "../../../etc/passwd", hostile["fifo"], hostile["zero"]]


def kinds(schema: dict[str, Any]) -> list[str]:
    found = [schema["type"]] if "type" in schema else []
    for alt in schema.get("anyOf", []):
        found += kinds(alt)
    return [k for k in found if k != "null"] or ["string"]


@pytest.mark.slow
@pytest.mark.anyio
async def test_every_tool_answers_hostile_arguments_with_a_sentence(
    hostile: dict[str, str], tmp_path: Path
) -> None:
    import anyio
    from mcp import Client

    from kernelcraft.base.config import Settings
    from kernelcraft.engine.host.local import LocalEvaluator
    from kernelcraft.server.app import create_server

    def evaluator(_s: Settings) -> LocalEvaluator:
        return LocalEvaluator(
            settings=knobs.settings(), device="cpu", workers=1, lazy=True, protect_environ=False
        )

    calls = 0
    async with Client(create_server(Settings(db_path=tmp_path / "kc.db"), evaluator)) as client:
        tools = (await client.list_tools()).tools
        assert tools
        for tool in tools:
            props = tool.input_schema.get("properties", {})
            required = tool.input_schema.get("required", [])
            # every argument of every tool in turn gets every hostile value of its kinds, the
            # others the plainest value of theirs
            for name, prop in props.items():
                for value in [v for kind in kinds(prop) for v in json_values(kind, hostile)]:
                    args = {r: plain(props[r]) for r in required}
                    args[name] = value
                    with anyio.fail_after(WAIT_S):
                        result = await client.call_tool(tool.name, args)
                    calls += 1
                    if not result.is_error:
                        continue
                    text = " ".join(getattr(c, "text", "") for c in result.content)
                    shown = (tool.name, name, str(value)[:60], text[:400])
                    for fault in (
                        "Traceback",
                        "OverflowError",
                        "RecursionError",
                        "too large to convert",
                        "MemoryError",
                    ):
                        assert fault not in text, shown
                    said = text.partition(f"Error executing tool {tool.name}")[2].lstrip(": ")
                    assert len(said if text.startswith("Error executing tool") else text) > 20, shown
    assert calls > 100


def plain(prop: dict[str, Any]) -> Any:
    if "enum" in prop:
        return prop["enum"][0]
    kind = kinds(prop)[0]
    return {"integer": 1, "number": 1.0, "boolean": False, "array": [], "object": {}}.get(kind, "x")


def test_the_hostile_values_are_the_issues_cases() -> None:
    assert "100000000000000000000000" in NUMBERS and DEEP.count("+") == 299_999
    assert sys.getrecursionlimit() < 300_000
