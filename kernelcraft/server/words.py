"""Every word of an MCP answer true for the client that reads it.

The engine's verdicts and notes are written once, for the command line ("pass --full-size",
"`kernelcraft compile --target sm_90a` checks it"): an MCP client has no such command and no
shell into the server. `McpWords` is the MCP audience's renderer: it rewrites each such phrase into
what the client can do (an argument of a tool it calls, a resource it reads, or what the server's
operator can do), strips the server's own file paths and memory addresses, and reads the same
way wherever a string goes out (structured content, text content, tool errors). The search layer
speaks through a `Voice` (`base/voice.py`) and needs no rewriting; this is for the layers that
speak to the command line alone (the engine).

`CLI_ISMS` is what no MCP answer may contain; `tests/server/test_mcp_words.py` scans every answer
of a scripted session against it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from kernelcraft.base.errortext import candidate_part

# (pattern, replacement) in order: whole phrases first, then single options.
_PHRASES: list[tuple[re.Pattern[str], str | Callable[[re.Match[str]], str]]] = [
    (
        re.compile(r"; run --full-size, or on a GPU, to check it"),
        "; a server with a GPU checks it at the task's own sizes",
    ),
    (
        re.compile(r"; pass --full-size to run them, or define get_cpu_inputs\(\)"),
        "; define get_cpu_inputs() in the task for other sizes (a GPU server runs the task's own)",
    ),
    (
        re.compile(
            r"define get_cpu_inputs\(\) returning small inputs, run on a GPU, or pass --full-size to run it anyway"
        ),
        "define get_cpu_inputs() returning small inputs, or run it on a server with a GPU",
    ),
    (re.compile(r"\(--timeout / timeout_s, now"), "(timeout_s, now"),
    (re.compile(r"give it more time \(--timeout\)"), "give it more time (timeout_s)"),
    (re.compile(r"model_mode='eval' \(--eval-mode\)"), "eval_mode=true"),
    (re.compile(r"the --memory-limit-gb limit"), "the server's memory limit (its operator sets it)"),
    (
        re.compile(r"`kernelcraft compile --target (?P<t>[\w.]+)` checks it"),
        lambda m: f"compile_kernel(targets=['{m['t']}']) on a server with more memory checks it",
    ),
    (
        re.compile(r"`kernelcraft tree status (?P<n>\d+)`"),
        lambda m: f"search_tree_step(action='status', tree_id={m['n']})",
    ),
    (re.compile(r"`kernelcraft tree start[^`]*`"), "search_tree_step(action='start', reference_code=...)"),
    (re.compile(r"`kernelcraft rules list`"), "query_rules"),
    (
        re.compile(r"`kernelcraft report --tree (?P<n>\d+)`"),
        lambda m: f"the resource trees://{m['n']}/report",
    ),
    (re.compile(r"--full-size"), "a GPU server (full sizes)"),
    (re.compile(r"--timeout\b"), "timeout_s"),
    (re.compile(r"--eval-mode\b"), "eval_mode=true"),
]

# The server's own paths and addresses: a client sees none of them.
_SERVER_PATH = re.compile(r"(?:/[^\s\"'`():]+)*/(?:site-packages|dist-packages|kernelcraft)/[^\s\"'`():,]+")
_ADDRESS = re.compile(r"\bat 0x[0-9a-fA-F]{6,}")

CLI_ISMS = re.compile(
    r"`kernelcraft [a-z]|(?<![\w-])--[a-z][a-z-]+\b|\bkernelcraft (tree|rules|report|verify|level) "
)
"""What an MCP answer never says: a kernelcraft command, or a command-line option."""
ENUM_REPR = re.compile(r"\b[A-Z][A-Za-z]+\.[A-Z][A-Z_]{2,}\b")
"""An enum's repr (`FailureClass.NUMERICAL_MISMATCH`): a value reads as its words."""


class McpWords:
    """The MCP audience's renderer of the engine's command-line words."""

    def text(self, text: str) -> str:
        for pattern, replacement in _PHRASES:
            text = pattern.sub(replacement, text)
        text = _SERVER_PATH.sub(_server_file, text)
        return _ADDRESS.sub("", text)

    def error(self, text: str) -> str:
        """An error for the client: a traceback cut to the candidate's frames and its exceptions,
        then rendered as `text`."""
        return self.text(candidate_part(text))

    def data(self, value: Any) -> Any:
        """`value` (a result's JSON data) with every string rendered (code is never touched) and
        every float to `FLOAT_DIGITS` significant digits."""
        if isinstance(value, str):
            return self.text(value) if _worded(value) else value
        if isinstance(value, float):
            # Six significant digits say every measured value (0.509091, 1.83721x, 1e-05); the binary
            # float's last digits (0.5090909090909091) say nothing and cost a context its bytes.
            return float(f"{value:.{FLOAT_DIGITS}g}")
        if isinstance(value, list):
            return [self.data(v) for v in value]
        if isinstance(value, dict):
            return {k: v if k in _CODE_KEYS else self.data(v) for k, v in value.items()}
        return value


# Fields that hold source code: sent as written.
_CODE_KEYS = frozenset({"code", "start_code", "task_source", "candidate_code", "reference_code", "source"})


def _worded(text: str) -> bool:
    return "--" in text or "kernelcraft" in text or "0x" in text


def _server_file(match: re.Match[str]) -> str:
    """A path on the server: no client needs to see where the server's code lives."""
    return "<server file>"


FLOAT_DIGITS = 6

MCP_WORDS = McpWords()
