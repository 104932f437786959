"""Every word of an MCP answer is true for the client that reads it (issue 38): no command-line
command or option, no enum repr, no sentence cut mid-word or said twice, no server path."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from bench.bench_session import _scripted, kernels, session, task
from bench.scripted import ScriptedEvaluator
from kernelcraft.base.errortext import CANDIDATE_FILE
from kernelcraft.engine.host.verdicts import DROPOUT_HINT, compile_timeout_words, mode_note
from kernelcraft.engine.source.shrink import describe
from kernelcraft.engine.worker.sizing import INPUTS_IGNORED
from kernelcraft.server.app import create_server
from kernelcraft.server.words import CLI_ISMS, ENUM_REPR, MCP_WORDS
from tests.server_support import settings_for

GLUED = re.compile(r"\w…|…\w")  # a word cut and glued to the mark of a cut
REPEATED = re.compile(r"(?i)\b(node \d+): \1\b")


def problems(text: str) -> list[str]:
    found = [m.group(0) for m in CLI_ISMS.finditer(text)]
    found += [m.group(0) for m in ENUM_REPR.finditer(text)]
    found += [m.group(0) for m in GLUED.finditer(text)]
    found += [m.group(0) for m in REPEATED.finditer(text)]
    found += ["server path"] * len(re.findall(r"site-packages|kernelcraft/engine|\bat 0x[0-9a-f]{6,}", text))
    return found


@pytest.fixture(scope="module")
def rows() -> list[dict[str, Any]]:
    return anyio.run(session, _scripted, kernels(lambda v: f"# verdict: {v}\n"), 6)


def test_no_answer_of_a_search_names_a_command_an_enum_or_a_cut_word(rows: list[dict[str, Any]]) -> None:
    for r in rows[1:]:
        assert problems(r["text"]) == [], r["answer"]
        assert problems(r["structured"]) == [], r["answer"]


@pytest.mark.parametrize(
    "engine_text",
    [
        INPUTS_IGNORED.format(sizes="(8,)", why="the reference is constant"),
        describe({"N": [4096, 64]}, "(4, 64)"),
        compile_timeout_words("", 120),
        mode_note("train", ["BatchNorm2d"]),
        mode_note("train", ["Dropout"]),
        DROPOUT_HINT.format(kinds="Dropout"),
        "the --memory-limit-gb limit was reached",
        "too large to build on this machine; `kernelcraft compile --target sm_90a` checks it",
        "ask for a new step with `kernelcraft tree status 3`",
    ],
)
def test_the_engines_command_line_words_are_rendered_for_an_mcp_client(engine_text: str) -> None:
    said = MCP_WORDS.text(engine_text)
    assert CLI_ISMS.search(said) is None, said


def test_an_error_keeps_only_the_candidates_frames() -> None:
    traceback = (
        "Traceback (most recent call last):\n"
        '  File "/usr/lib/python3.11/site-packages/triton/runtime/interpreter.py", line 9, in run\n'
        "    fn()\n"
        '  File "/srv/kernelcraft/engine/worker/main.py", line 3, in trial\n'
        "    out = model(*inputs)\n"
        f'  File "/tmp/x/{CANDIDATE_FILE}", line 12, in forward\n'
        "    y = tl.tanh(x)\n"
        "AttributeError: module 'triton.language' has no attribute 'tanh' (object at 0x7f3a2b4c5d60)\n"
    )
    said = MCP_WORDS.error(traceback)
    assert "site-packages" not in said and "kernelcraft/engine" not in said and "0x7f3a" not in said
    assert f'File "{CANDIDATE_FILE}", line 12' in said and "has no attribute 'tanh'" in said


@pytest.mark.anyio
async def test_errors_over_mcp_name_the_mcp_tool_not_a_command(tmp_path: Path) -> None:
    server = create_server(settings_for(tmp_path), lambda _: ScriptedEvaluator())
    async with Client(server) as client:
        missing = await client.call_tool("search_tree_step", {"action": "status", "tree_id": 7})
        assert missing.is_error
        text = missing.content[0].text  # type: ignore[union-attr]
        assert "search_tree_step(action='start'" in text and problems(text) == []
        started = await client.call_tool(
            "search_tree_step",
            {"action": "start", "reference_code": task(), "candidate_code": kernels(marker)["seed"]},
        )
        tree = (started.structured_content or {})["start"]["tree"]["id"]
        wrong = await client.call_tool(
            "search_tree_step",
            {"action": "submit", "tree_id": tree, "node_id": 999, "candidate_code": kernels(marker)["wrong"]},
        )
        assert wrong.is_error
        text = wrong.content[0].text  # type: ignore[union-attr]
        assert f"search_tree_step(action='status', tree_id={tree})" in text and problems(text) == []


def marker(verdict: str) -> str:
    return f"# verdict: {verdict}\n"


@pytest.mark.anyio
async def test_every_prompt_names_mcp_tools_and_no_command(tmp_path: Path) -> None:
    server = create_server(settings_for(tmp_path), lambda _: ScriptedEvaluator())
    values = {"reference_code": task(), "candidate_code": kernels()["seed"], "error": "AttributeError: x"}
    async with Client(server) as client:
        prompts = (await client.list_prompts()).prompts
        assert prompts
        for prompt in prompts:
            args = {a.name: values.get(a.name, "sm_90a") for a in prompt.arguments or [] if a.required}
            got = await client.get_prompt(prompt.name, args)
            text = " ".join(getattr(m.content, "text", "") for m in got.messages)
            assert "search_tree_step" in text or "record_failure" in text, prompt.name
            assert problems(text.replace(kernels()["seed"], "").replace(task(), "")) == [], prompt.name
