"""The OpenAI-compatible backend: any server speaking `/v1/chat/completions` with tools.

That covers OpenAI itself and local servers: vLLM (`--enable-auto-tool-choice`), Ollama
(`http://localhost:11434/v1`), llama.cpp's `llama-server --jinja`. Answers come through a forced
function call (`tool_choice={"type": "function", ...}`). Some local servers ignore a forced choice
and answer in the message text; when that text is a JSON object it is accepted as the arguments.
Local models have no price: their tokens are counted, their cost is reported as unknown. Retries
are the SDK's own (`sdk_max_retries`, `llm.SDK_MAX_RETRIES` by default).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import openai

from kernelcraft.agent.llm.core import SDK_MAX_RETRIES, LLMReply, Message, ToolCall, ToolSpec, Usage
from kernelcraft.base.errors import LLMError


def _json_object(text: str) -> dict[str, Any] | None:
    text = text.strip()
    if text.startswith("```"):
        text = text.strip("`")
        text = text.split("\n", 1)[1] if "\n" in text else ""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        return None
    try:
        value = json.loads(text[start : end + 1])
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


@dataclass
class OpenAICompatibleLLM:
    client: openai.AsyncOpenAI
    model_id: str
    max_tokens: int = 16_384

    @classmethod
    def create(
        cls,
        *,
        api_key: str,
        model: str,
        base_url: str | None = None,
        max_tokens: int = 16_384,
        sdk_max_retries: int = SDK_MAX_RETRIES,
        timeout_s: float = 600.0,
    ) -> OpenAICompatibleLLM:
        client = openai.AsyncOpenAI(
            api_key=api_key, base_url=base_url, max_retries=sdk_max_retries, timeout=timeout_s
        )
        return cls(client, model, max_tokens)

    @property
    def model(self) -> str:
        return self.model_id

    def request(
        self, system: str, messages: list[Message], tools: list[ToolSpec], force_tool: str
    ) -> dict[str, Any]:
        return {
            "model": self.model_id,
            "max_tokens": self.max_tokens,
            "messages": [{"role": "system", "content": system}]
            + [{"role": m.role, "content": m.content} for m in messages],
            "tools": [
                {
                    "type": "function",
                    "function": {"name": t.name, "description": t.description, "parameters": t.input_schema},
                }
                for t in tools
            ],
            "tool_choice": {"type": "function", "function": {"name": force_tool}},
        }

    async def call(
        self, system: str, messages: list[Message], tools: list[ToolSpec], force_tool: str
    ) -> LLMReply:
        body = self.request(system, messages, tools, force_tool)
        try:
            resp = await self.client.chat.completions.create(**body)
        except openai.AuthenticationError as e:
            raise LLMError(
                f"the server at {self.client.base_url} rejected the API key (401): check the variable "
                "named by --api-key-env (default OPENAI_API_KEY)"
            ) from e
        except openai.NotFoundError as e:
            raise LLMError(
                f"the server at {self.client.base_url} answered 404 for model {self.model_id!r}: check "
                "--model and --base-url (it usually ends in /v1)"
            ) from e
        except openai.APIStatusError as e:
            raise LLMError(
                f"the server at {self.client.base_url} refused the request ({e.status_code}): {e.message}"
            ) from e
        except openai.APIConnectionError as e:
            raise LLMError(f"cannot reach {self.client.base_url}: {e}; is the server running?") from e

        usage = Usage(calls=1, cost_usd=None)
        if resp.usage is not None:
            usage.input_tokens = resp.usage.prompt_tokens or 0
            usage.output_tokens = resp.usage.completion_tokens or 0
        if not resp.choices:
            return LLMReply(tool_call=None, usage=usage, text="", stop_reason=None)
        choice = resp.choices[0]
        msg = choice.message
        text = msg.content or ""
        call: ToolCall | None = None
        for tc in msg.tool_calls or []:
            fn = getattr(tc, "function", None)
            if fn is None or fn.name != force_tool:
                continue
            try:
                args = json.loads(fn.arguments or "{}")
            except json.JSONDecodeError:
                text = f"{text}\n(arguments of {fn.name} were not valid JSON: {fn.arguments[:200]!r})".strip()
                continue
            if isinstance(args, dict):
                call = ToolCall(fn.name, args)
                break
        if call is None and text:
            parsed = _json_object(text)
            if parsed is not None:
                call = ToolCall(force_tool, parsed)
        return LLMReply(tool_call=call, usage=usage, text=text, stop_reason=choice.finish_reason)

    async def aclose(self) -> None:
        await self.client.close()
