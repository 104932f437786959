"""The model that merges near-duplicate rules, wired into every server that has a model: the
in-process server of `optimize`/`adapt` with an LLM, and `kernelcraft serve --llm …`. The model is
a local server speaking the OpenAI and Anthropic protocols (`agent_fakes.py`); without one, the
server says once in its log that rules merge by text alone."""

from __future__ import annotations

import json
import logging
import sqlite3
import sys
from pathlib import Path

import anyio
import pytest
from agent_fakes import Reply, Script, serve
from mcp import Client, StdioServerParameters
from server_support import REPO, subprocess_env

from kernelcraft.agent.llm.config import LLMConfig
from kernelcraft.agent.llm.judge import JUDGE_MAX_TOKENS, judge_for
from kernelcraft.agent.loop.session import ToolSession, open_session
from kernelcraft.knowledge.dedup import judge_prompt
from kernelcraft.knowledge.text import is_near_duplicate, normalize_rule
from kernelcraft.server.state import NO_JUDGE

ERFCX = "You cannot call tl.libdevice.erfcx inside a Triton kernel."
PARAPHRASE = "You cannot use the erfcx function from libdevice in Triton code."
ERROR = "AttributeError: module 'triton.language' has no attribute 'libdevice'"
SEED_RULES = [
    json.loads(line)["text"]
    for line in (REPO / "kernelcraft" / "knowledge" / "seed_rules.jsonl").read_text().splitlines()
    if line.strip()
]
NEW = {"is_duplicate": False, "matched_index": None, "confidence": 0.9, "reason": "nothing like it"}
# the paraphrase duplicates ERFCX, the rule after the seed rules (AdaExplore's 1-based index)
DUPLICATE = {"is_duplicate": True, "matched_index": len(SEED_RULES) + 1, "confidence": 0.9, "reason": "same"}


def rules_of(db: Path) -> list[tuple[str, int]]:
    with sqlite3.connect(db) as conn:
        return [(t, c) for t, c in conn.execute("SELECT text, count FROM rules WHERE seed = 0 ORDER BY id")]


async def record_both(session: ToolSession) -> None:
    for i, rule in enumerate((ERFCX, PARAPHRASE)):
        await session.record_failure(
            f"class ModelNew: ...  # {i}",
            ERROR,
            reference_code="",
            arch="sm_90a",
            rule=rule,
            failure_class=None,
        )


def test_the_two_rules_are_a_paraphrase_that_text_similarity_misses_and_near_no_seed_rule() -> None:
    assert not is_near_duplicate(normalize_rule(ERFCX), normalize_rule(PARAPHRASE))
    for seed in SEED_RULES:
        assert not any(
            is_near_duplicate(normalize_rule(r), normalize_rule(seed)) for r in (ERFCX, PARAPHRASE)
        )


@pytest.mark.anyio
@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_the_in_process_server_of_a_run_with_a_model_merges_a_paraphrase_by_asking_it(
    tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-fake")
    script = Script().add("judge_duplicate", Reply(NEW), Reply(DUPLICATE, input_tokens=700, output_tokens=40))
    db = tmp_path / "kc.db"
    with serve(script) as base:
        llm = LLMConfig(
            kind=kind,  # type: ignore[arg-type]
            model="judge-model",
            base_url=f"{base}/v1" if kind == "openai" else base,
            api_key_env="none" if kind == "openai" else None,
            thinking_budget=2048 if kind == "anthropic" else None,  # the judge thinks not
            sdk_max_retries=0,
        )
        judge = judge_for(llm, server_url=None)
        assert judge is not None
        try:
            async with open_session(server_url=None, token_env=None, db_path=db, judge=judge) as session:
                await record_both(session)
        finally:
            await judge.aclose()
    assert rules_of(db) == [(ERFCX, 2)]  # one rule, counted twice
    first, second = script.requests_for("judge_duplicate")  # each rule against every rule before it
    prompt = second["messages"][-1]["content"]
    assert prompt == judge_prompt(PARAPHRASE, [*SEED_RULES, ERFCX])  # AdaExplore's prompt, word for word
    request = second
    assert request["max_tokens"] == JUDGE_MAX_TOKENS
    assert "thinking" not in request
    assert (judge.usage.total.calls, judge.usage.total.input_tokens) == (2, 1000 + 700)


@pytest.mark.anyio
async def test_without_a_model_the_server_says_once_that_rules_merge_by_text_alone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "kc.db"
    assert judge_for(LLMConfig(kind="none"), server_url=None) is None
    assert (
        judge_for(LLMConfig(kind="openai", model="m", api_key_env="none"), server_url="http://team/mcp")
        is None
    )
    with caplog.at_level(logging.INFO, logger="kernelcraft.server.state"):
        async with open_session(server_url=None, token_env=None, db_path=db) as session:
            await record_both(session)
    assert sorted(rules_of(db)) == sorted([(ERFCX, 1), (PARAPHRASE, 1)])  # two rules: text misses it
    assert [r.message for r in caplog.records].count(NO_JUDGE) == 1


@pytest.mark.slow
@pytest.mark.anyio
async def test_kernelcraft_serve_with_llm_openai_merges_a_paraphrase_through_the_model(
    tmp_path: Path,
) -> None:
    script = Script().add("judge_duplicate", Reply(NEW), Reply(DUPLICATE))
    db = tmp_path / "serve.db"
    with serve(script) as base:
        args = ["-m", "kernelcraft", "serve", "--llm", "openai", "--model", "judge-model"]
        args += ["--base-url", f"{base}/v1", "--api-key-env", "none"]
        params = StdioServerParameters(
            command=sys.executable, args=args, env=subprocess_env(db), cwd=str(REPO)
        )
        with anyio.fail_after(120):
            async with Client(params) as client:
                await record_both(ToolSession(client, "kernelcraft serve"))
    assert rules_of(db) == [(ERFCX, 2)]
    request = script.requests_for("judge_duplicate")[-1]
    assert request["model"] == "judge-model"
    assert [t["function"]["name"] for t in request["tools"]] == ["judge_duplicate"]
