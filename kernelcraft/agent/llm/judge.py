"""The model that judges duplicate rules: AdaExplore's dedup judge, on the run's own model.

The rulebook (`knowledge/rulebook.py`) asks a `RuleJudge` whether a proposed rule duplicates an
existing one; it builds AdaExplore's prompt itself (`knowledge/dedup.py`) and reads the answer as
AdaExplore reads it. This module is the model end of that edge: `ModelJudge` sends the prompt to
the configured model, as AdaExplore sends it to the model that runs its search
(`skill_memory.update_memory` passes its `model_name`), with at most 1,000 output tokens
(`llm_judge_duplicate_batch`'s `max_completion_tokens=1000`) and no extended thinking. The answer
comes back through a forced tool call whose fields are the JSON object the prompt asks for, and
is handed to the rulebook as that JSON text.

Who builds one: whoever holds the model's key and starts a server — `kernelcraft serve --llm …`
(the CLI) and the agent's in-process server (`judge_for`, from `optimize`'s and `adapt`'s `--llm`).
A team's server (`--server URL`) judges with its own model, or none. The judge adds its tokens and
dollars to a `UsageMeter` (`usage`): one `optimize` run's own meter, so its budgets and summary
count them (and its calls go to the run's `prompts.jsonl`), or, for a server shared by several
runs (`adapt`, a level's phases), the judge's own, which they report beside the runs'.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from kernelcraft.agent.llm.config import LLMConfig, make_llm
from kernelcraft.agent.llm.core import LLM, Message, ToolSpec, UsageMeter
from kernelcraft.agent.llm.wrappers import LoggedLLM

# AdaExplore's judge call: `max_completion_tokens=1000` (skill_memory/deduplicate_knowledge.py).
JUDGE_MAX_TOKENS = 1000

JUDGE_DUPLICATE = ToolSpec(
    name="judge_duplicate",
    description="Answer with the JSON object the message asks for: whether the new knowledge item "
    "duplicates an existing one, which (1-based), how confident you are, and why.",
    input_schema={
        "type": "object",
        "properties": {
            "is_duplicate": {"type": "boolean"},
            "matched_index": {
                "type": ["integer", "null"],
                "description": "1-based index of the matched existing item, or null.",
            },
            "confidence": {"type": "number", "minimum": 0, "maximum": 1},
            "reason": {"type": "string", "description": "A brief explanation."},
        },
        "required": ["is_duplicate", "matched_index", "confidence"],
    },
)
SYSTEM = "You judge whether knowledge items duplicate each other. Answer through the judge_duplicate tool."


class ModelJudge:
    """A `RuleJudge` (`knowledge/dedup.py`) on a language model: the prompt in, the JSON text out.
    An unreachable model raises `LLMError`; the rulebook then compares the rule by text."""

    def __init__(self, llm: LLM, usage: UsageMeter | None = None) -> None:
        self.llm = llm
        self.usage = usage if usage is not None else UsageMeter()

    @property
    def model(self) -> str:
        return self.llm.model

    async def __call__(self, prompt: str) -> str:
        reply = await self.llm.call(
            SYSTEM, [Message("user", prompt)], [JUDGE_DUPLICATE], JUDGE_DUPLICATE.name
        )
        self.usage.add(reply.usage)
        if reply.tool_call is None:  # read as text, as AdaExplore reads a plain answer
            return reply.text
        return json.dumps(reply.tool_call.input)

    async def aclose(self) -> None:
        await self.llm.aclose()


def judge_config(llm: LLMConfig) -> LLMConfig:
    """The run's model, as AdaExplore's judge calls it: 1,000 output tokens, no thinking."""
    return dataclasses.replace(llm, max_tokens=JUDGE_MAX_TOKENS, thinking_budget=None)


def judge_for(
    llm: LLMConfig, server_url: str | None, usage: UsageMeter | None = None, transcript: Path | None = None
) -> ModelJudge | None:
    """The judge of the in-process server for a run with `llm`: None with `--llm none` (no model:
    the server says so in its log) or with a team's server (`server_url`), which has its own.
    `usage`: the meter its calls add to (a run's own, so that its budgets count them; else its own);
    `transcript`: a `prompts.jsonl` its calls are appended to."""
    if server_url or llm.kind == "none":
        return None
    model = make_llm(judge_config(llm))
    if model is None:
        return None
    return ModelJudge(LoggedLLM(model, transcript) if transcript is not None else model, usage)
