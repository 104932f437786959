"""The Anthropic backend: Claude through the Messages API (anthropic >= 2.16).

- Prompt caching: the system prompt and the tool definitions carry `cache_control: ephemeral`, so
  every call of a run after the first reads that prefix from the cache (a tenth of the price or less).
- Forced answers: `tool_choice={"type": "tool", "name": ...}`. The API refuses a forced tool choice
  together with extended thinking, so with `thinking_budget` set the choice is `auto` and the prompt
  asks for the tool; a reply without it comes back as `tool_call=None` for the caller to handle.
- Retries: the SDK's own, of 408/409/429/5xx (529 overloaded included) and dropped connections,
  with backoff and Retry-After (`sdk_max_retries`, `llm.SDK_MAX_RETRIES` by default).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import anthropic

from kernelcraft.agent.llm.core import (
    SDK_MAX_RETRIES,
    LLMReply,
    Message,
    ToolCall,
    ToolSpec,
    Usage,
    cost_of,
)
from kernelcraft.base.errors import LLMError, LLMSetupError


@dataclass
class AnthropicLLM:
    client: anthropic.AsyncAnthropic
    model_id: str
    max_tokens: int = 16_384
    thinking_budget: int | None = None

    @classmethod
    def create(
        cls,
        *,
        api_key: str,
        model: str,
        base_url: str | None = None,
        max_tokens: int = 16_384,
        thinking_budget: int | None = None,
        sdk_max_retries: int = SDK_MAX_RETRIES,
        timeout_s: float = 600.0,
    ) -> AnthropicLLM:
        if thinking_budget is not None and not 1024 <= thinking_budget < max_tokens:
            raise LLMSetupError(
                f"--thinking-budget {thinking_budget} must be at least 1024 and below --max-output-tokens {max_tokens}"
            )
        client = anthropic.AsyncAnthropic(
            api_key=api_key, base_url=base_url, max_retries=sdk_max_retries, timeout=timeout_s
        )
        return cls(client, model, max_tokens, thinking_budget)

    @property
    def model(self) -> str:
        return self.model_id

    def request(
        self, system: str, messages: list[Message], tools: list[ToolSpec], force_tool: str
    ) -> dict[str, Any]:
        """The request body (exposed so tests can check caching and the tool choice)."""
        tool_defs: list[dict[str, Any]] = [
            {"name": t.name, "description": t.description, "input_schema": t.input_schema} for t in tools
        ]
        if tool_defs:
            tool_defs[-1]["cache_control"] = {"type": "ephemeral"}
        body: dict[str, Any] = {
            "model": self.model_id,
            "max_tokens": self.max_tokens,
            "system": [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
            "tools": tool_defs,
            "messages": [{"role": m.role, "content": m.content} for m in messages],
        }
        if self.thinking_budget is not None:
            body["thinking"] = {"type": "enabled", "budget_tokens": self.thinking_budget}
            body["tool_choice"] = {"type": "auto"}
        else:
            body["tool_choice"] = {"type": "tool", "name": force_tool}
        return body

    async def call(
        self, system: str, messages: list[Message], tools: list[ToolSpec], force_tool: str
    ) -> LLMReply:
        body = self.request(system, messages, tools, force_tool)
        try:
            resp = await self.client.messages.create(**body)
        except anthropic.AuthenticationError as e:
            raise LLMError(
                "Anthropic rejected the API key (401): check ANTHROPIC_API_KEY (or the variable given "
                "to --api-key-env)"
            ) from e
        except anthropic.NotFoundError as e:
            raise LLMError(
                f"Anthropic does not know model {self.model_id!r} (404): pick one listed in "
                "anthropic.types.Model with --model"
            ) from e
        except anthropic.APIStatusError as e:
            raise LLMError(f"Anthropic refused the request ({e.status_code}): {e.message}") from e
        except anthropic.APIConnectionError as e:
            raise LLMError(
                f"cannot reach the Anthropic API at {self.client.base_url}: {e}; check the network "
                "or --base-url"
            ) from e

        u = resp.usage
        details = getattr(u, "output_tokens_details", None)
        usage = Usage(
            input_tokens=u.input_tokens,
            output_tokens=u.output_tokens,
            cache_creation_input_tokens=u.cache_creation_input_tokens or 0,
            cache_read_input_tokens=u.cache_read_input_tokens or 0,
            thinking_tokens=int(getattr(details, "thinking_tokens", 0) or 0),
            calls=1,
        )
        usage.cost_usd = cost_of(self.model_id, usage)
        call: ToolCall | None = None
        texts: list[str] = []
        for block in resp.content:
            if block.type == "tool_use" and call is None and block.name == force_tool:
                call = ToolCall(block.name, dict(block.input) if isinstance(block.input, dict) else {})
            elif block.type == "text":
                texts.append(block.text)
        return LLMReply(tool_call=call, usage=usage, text="\n".join(texts), stop_reason=resp.stop_reason)

    async def aclose(self) -> None:
        await self.client.close()
