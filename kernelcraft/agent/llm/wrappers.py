"""Wrappers around the driver's language model (`llm.LLM`): a run's transcript and a dry run.

`LoggedLLM` appends every call to `prompts.jsonl` in the run directory; `DryRunLLM` prints the
first request and stops the run (`optimize --dry-run`). Both speak the `LLM` protocol, so the
run loop does not know which it has.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from pathlib import Path
from typing import Any

from kernelcraft.agent.llm.core import LLM, LLMReply, Message, ToolSpec
from kernelcraft.base.errors import LLMError


class LoggedLLM:
    """An `LLM` that appends every call (the system prompt once per distinct text, the messages,
    the tool it forced, the answer, the usage) to a JSON Lines file: a run's transcript
    (`prompts.jsonl` in the run directory), written and flushed as each call returns, so a run
    killed mid-way keeps what it asked."""

    def __init__(self, inner: LLM, path: Path) -> None:
        self.inner = inner
        self.path = path
        self._systems: set[str] = set()

    @property
    def model(self) -> str:
        return self.inner.model

    async def call(
        self, system: str, messages: list[Message], tools: list[ToolSpec], force_tool: str
    ) -> LLMReply:
        started = time.time()
        error: str | None = None
        reply: LLMReply | None = None
        try:
            reply = await self.inner.call(system, messages, tools, force_tool)
            return reply
        except Exception as e:
            error = f"{type(e).__name__}: {e}"
            raise
        finally:
            self._write(system, messages, force_tool, reply, error, started)

    def _write(
        self,
        system: str,
        messages: list[Message],
        force_tool: str,
        reply: LLMReply | None,
        error: str | None,
        started: float,
    ) -> None:
        digest = hashlib.sha256(system.encode()).hexdigest()[:16]
        record: dict[str, Any] = {
            "at": started,
            "seconds": round(time.time() - started, 3),
            "model": self.inner.model,
            "system_sha": digest,
            "messages": [{"role": m.role, "content": m.content} for m in messages],
            "force_tool": force_tool,
        }
        if digest not in self._systems:  # each distinct system prompt once
            self._systems.add(digest)
            record["system"] = system
        if reply is not None:
            record["answer"] = reply.tool_call.input if reply.tool_call is not None else None
            record["text"] = reply.text
            record["stop_reason"] = reply.stop_reason
            record["usage"] = dataclasses.asdict(reply.usage)
        if error is not None:
            record["error"] = error
        try:
            with self.path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
        except OSError:
            pass  # a transcript is a record, never a reason to stop a run

    async def aclose(self) -> None:
        await self.inner.aclose()


class DryRunStop(LLMError):
    """A dry run printed the prompt it would have sent; no model was called."""


class DryRunLLM:
    """An `LLM` that prints the first request it gets (system prompt and user message) to `out`
    and stops the run (`optimize --dry-run`): what a model would be asked, at no cost."""

    def __init__(self, model: str, out: Any) -> None:
        self._model = model
        self.out = out

    @property
    def model(self) -> str:
        return self._model

    async def call(
        self, system: str, messages: list[Message], tools: list[ToolSpec], force_tool: str
    ) -> LLMReply:
        print(f"# system prompt\n{system}", file=self.out)
        for m in messages:
            print(f"\n# {m.role} message (the model must call {force_tool})\n{m.content}", file=self.out)
        raise DryRunStop("dry run: printed the first step's prompt; no model was called")

    async def aclose(self) -> None:
        return None
