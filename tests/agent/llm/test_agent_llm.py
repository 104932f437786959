"""The LLM backends against local servers speaking the real protocols, with the real SDKs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from agent_fakes import HttpError, Reply, Script, serve

from kernelcraft.agent.llm.anthropic_backend import AnthropicLLM
from kernelcraft.agent.llm.config import LLMConfig, load_dotenv, make_llm
from kernelcraft.agent.llm.core import (
    ANSWER_TOOLS,
    PROPOSE_RULE,
    SDK_MAX_RETRIES,
    SUBMIT_KERNEL,
    Message,
    cost_of,
    price_for,
)
from kernelcraft.agent.llm.openai_backend import OpenAICompatibleLLM
from kernelcraft.base.errors import LLMError, LLMSetupError, UsageError

RETRIES = 2  # the SDK's own retries in these tests (its backoff: about 0.5 s, then 1 s)
ASK = [Message("user", "Write the kernel.")]


def anthropic_llm(base: str, **kw: object) -> AnthropicLLM:
    return AnthropicLLM.create(
        api_key="test-key",
        model="claude-sonnet-5-5",
        base_url=base,
        sdk_max_retries=RETRIES,
        **kw,
    )  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_anthropic_backend_forces_the_answer_tool_caches_the_prefix_and_prices_the_call() -> None:
    script = Script().add(
        "submit_kernel",
        Reply(
            {"code": "class ModelNew: ...", "notes": "n"}, input_tokens=100, output_tokens=50, cache_read=2000
        ),
    )
    with serve(script) as base:
        llm = anthropic_llm(base)
        try:
            reply = await llm.call("SYSTEM", ASK, list(ANSWER_TOOLS), "submit_kernel")
        finally:
            await llm.aclose()
    assert reply.tool_call is not None and reply.tool_call.input["code"] == "class ModelNew: ..."
    body = script.requests[0]
    assert body["tool_choice"] == {"type": "tool", "name": "submit_kernel"}
    assert body["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert body["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert [t["name"] for t in body["tools"]] == [t.name for t in ANSWER_TOOLS]
    assert reply.usage.cache_read_input_tokens == 2000
    # claude-sonnet-5-5: $2 in, $10 out, $0.10 cache read per million tokens
    assert reply.usage.cost_usd == pytest.approx((100 * 2 + 50 * 10 + 2000 * 0.10) / 1e6)


@pytest.mark.anyio
async def test_anthropic_backend_retries_a_529_overload_and_a_429_through_the_sdk_then_answers() -> None:
    script = Script().add(
        "propose_rule",
        HttpError(529, "overloaded_error", "Overloaded"),
        HttpError(429, "rate_limit_error", "slow down", headers={"retry-after": "0"}),
        Reply({"text": "You cannot call tl.float32 as a function."}),
    )
    with serve(script) as base:
        llm = anthropic_llm(base)
        try:
            reply = await llm.call("S", ASK, [PROPOSE_RULE], "propose_rule")
        finally:
            await llm.aclose()
    assert reply.tool_call is not None and reply.tool_call.input["text"].startswith("You cannot")
    assert script.served == [
        ("propose_rule", "error 529"),
        ("propose_rule", "error 429"),
        ("propose_rule", "reply"),
    ]


@pytest.mark.anyio
async def test_anthropic_backend_gives_up_after_the_sdks_bounded_retries_with_an_llm_error() -> None:
    script = Script().add("propose_rule", *[HttpError(529) for _ in range(RETRIES + 2)])
    with serve(script) as base:
        llm = anthropic_llm(base)
        try:
            with pytest.raises(LLMError, match="529"):
                await llm.call("S", ASK, [PROPOSE_RULE], "propose_rule")
        finally:
            await llm.aclose()
    assert len(script.served) == RETRIES + 1  # one try and the SDK's retries; no layer of ours on top


@pytest.mark.anyio
async def test_anthropic_backend_says_which_variable_holds_a_rejected_key() -> None:
    script = Script().add("submit_kernel", HttpError(401, "authentication_error", "invalid x-api-key"))
    with serve(script) as base:
        llm = anthropic_llm(base)
        try:
            with pytest.raises(LLMError, match="ANTHROPIC_API_KEY"):
                await llm.call("S", ASK, [SUBMIT_KERNEL], "submit_kernel")
        finally:
            await llm.aclose()


@pytest.mark.anyio
async def test_anthropic_backend_with_thinking_lets_the_model_choose_and_reports_a_missing_tool_call() -> (
    None
):
    script = Script().add("submit_kernel", Reply(None, text="I think the kernel should..."))
    with serve(script) as base:
        llm = anthropic_llm(base, thinking_budget=2048, max_tokens=8192)
        try:
            reply = await llm.call("S", ASK, [SUBMIT_KERNEL], "submit_kernel")
        finally:
            await llm.aclose()
    body = script.requests[0]
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert body["tool_choice"] == {"type": "auto"}
    assert reply.tool_call is None and "kernel should" in reply.text


@pytest.mark.anyio
async def test_openai_backend_forces_the_function_and_retries_a_503() -> None:
    script = Script().add(
        "submit_edits",
        HttpError(503, "server_error", "busy"),
        Reply({"edits": [{"old": "num_warps=4", "new": "num_warps=8"}]}, input_tokens=30, output_tokens=7),
    )
    with serve(script) as base:
        llm = OpenAICompatibleLLM.create(
            api_key="k", model="qwen-coder", base_url=f"{base}/v1", sdk_max_retries=RETRIES
        )
        try:
            reply = await llm.call("SYS", ASK, list(ANSWER_TOOLS), "submit_edits")
        finally:
            await llm.aclose()
    assert reply.tool_call is not None and reply.tool_call.input["edits"][0]["new"] == "num_warps=8"
    body = script.requests[-1]
    assert body["tool_choice"] == {"type": "function", "function": {"name": "submit_edits"}}
    assert body["messages"][0] == {"role": "system", "content": "SYS"}
    assert reply.usage.input_tokens == 30 and reply.usage.cost_usd is None  # a local model has no price
    assert [s for _, s in script.served] == ["error 503", "reply"]


@pytest.mark.anyio
async def test_openai_backend_accepts_json_arguments_given_as_text_by_servers_that_ignore_tool_choice() -> (
    None
):
    script = Script().add("propose_rule", Reply(None, text='```json\n{"text": "no guidance"}\n```'))
    with serve(script) as base:
        llm = OpenAICompatibleLLM.create(api_key="k", model="m", base_url=f"{base}/v1", sdk_max_retries=0)
        try:
            reply = await llm.call("S", ASK, [PROPOSE_RULE], "propose_rule")
        finally:
            await llm.aclose()
    assert reply.tool_call is not None and reply.tool_call.input == {"text": "no guidance"}


def test_a_missing_anthropic_key_is_a_usage_error_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(LLMSetupError, match=r"\$ANTHROPIC_API_KEY.*--llm none") as e:
        make_llm(LLMConfig(kind="anthropic"))
    assert isinstance(e.value, UsageError)  # exit 2, as any other unusable argument


def test_the_backends_leave_retries_to_the_sdk_clients() -> None:
    llm = make_llm(LLMConfig(kind="openai", model="m", base_url="http://127.0.0.1:1/v1", api_key_env="none"))
    assert isinstance(llm, OpenAICompatibleLLM) and llm.client.max_retries == SDK_MAX_RETRIES >= 5
    a = AnthropicLLM.create(api_key="k", model="claude-sonnet-5-5")
    assert a.client.max_retries == SDK_MAX_RETRIES
    import kernelcraft.agent.llm.core as llm_module

    assert not hasattr(llm_module, "with_retries") and not hasattr(llm_module, "RetryPolicy")


def test_a_missing_openai_key_names_the_variable_given_by_api_key_env(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("MY_VLLM_KEY", raising=False)
    with pytest.raises(LLMError, match=r"\$OPENAI_API_KEY"):
        make_llm(LLMConfig(kind="openai", model="m", base_url="http://127.0.0.1:1/v1"))
    with pytest.raises(LLMError, match=r"\$MY_VLLM_KEY"):
        make_llm(LLMConfig(kind="openai", model="m", api_key_env="MY_VLLM_KEY"))
    assert make_llm(LLMConfig(kind="openai", model="m", base_url="http://127.0.0.1:1/v1", api_key_env="none"))
    assert make_llm(LLMConfig(kind="none")) is None


def test_dotenv_fills_missing_variables_and_never_overrides_set_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KC_ALREADY", "from-env")
    monkeypatch.delenv("KC_NEW", raising=False)
    monkeypatch.delenv("KC_QUOTED", raising=False)
    monkeypatch.delenv("KC_MULTI", raising=False)
    monkeypatch.delenv("KC_COMMENTED", raising=False)
    (tmp_path / ".env").write_text(
        "# keys\nKC_ALREADY=from-file\nexport KC_NEW=abc\nKC_QUOTED='x y'\n"
        'KC_MULTI="line one\\nline two"\nKC_COMMENTED=value # a comment\n'
    )
    assert sorted(load_dotenv(tmp_path / ".env")) == ["KC_COMMENTED", "KC_MULTI", "KC_NEW", "KC_QUOTED"]
    assert os.environ["KC_ALREADY"] == "from-env"
    assert os.environ["KC_NEW"] == "abc" and os.environ["KC_QUOTED"] == "x y"
    # what a hand-written reader got wrong and python-dotenv parses: escapes, inline comments
    assert os.environ["KC_MULTI"] == "line one\nline two" and os.environ["KC_COMMENTED"] == "value"


def test_prices_match_dated_model_ids_and_unknown_models_have_no_price() -> None:
    assert price_for("claude-haiku-4-5-20251001") == price_for("claude-haiku-4-5")
    assert price_for("claude-opus-5-5") != price_for("claude-opus-5")
    assert price_for("llama-3.1-8b") is None
    from kernelcraft.agent.llm.core import Usage

    assert cost_of("llama-3.1-8b", Usage(input_tokens=10)) is None
