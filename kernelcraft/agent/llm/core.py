"""The one small interface the driver uses to talk to a language model, and what it counts.

Every call the driver makes is a *forced tool call*: the model must answer through one of the
answer tools below (`submit_kernel`, `submit_edits`, `propose_rule`, `propose_improvements`), so an
answer is a validated dict, never free text to scrape. Backends (`anthropic_backend`,
`openai_backend`) implement `LLM.call`; `config.make_llm` builds one from the command-line flags.

Retries are the SDKs' own (`SDK_MAX_RETRIES`).

Who writes what: a backend adds to the run's `UsageMeter` after every call; the explore loop reads it
to enforce the token and dollar budgets.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

logger = logging.getLogger(__name__)

# The SDKs' own retries (exponential backoff with jitter, honouring Retry-After) of 408, 409, 429,
# 5xx (Anthropic's 529 overloaded included) and dropped connections: enough to outlast a burst of
# overloads (about half a minute of backoff, more where the server sends Retry-After) before a call
# fails with an LLMError.
SDK_MAX_RETRIES = 8

# A current Claude model (listed in anthropic.types.Model for anthropic 2.16): strong at code, a
# fifth of Opus's price. Override with --model.
DEFAULT_ANTHROPIC_MODEL = "claude-sonnet-5-5"


@dataclass(frozen=True)
class ToolSpec:
    """An answer tool: the JSON schema the model's answer must satisfy."""

    name: str
    description: str
    input_schema: dict[str, Any]


@dataclass(frozen=True)
class Message:
    role: Literal["user", "assistant"]
    content: str


@dataclass(frozen=True)
class ToolCall:
    name: str
    input: dict[str, Any]


@dataclass
class Usage:
    """Tokens of one call (or of a whole run, when summed) and their price in dollars.

    `cost_usd` is None when the model has no entry in the price table (a local model): tokens are
    still counted and the dollar budget cannot be enforced for it.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    thinking_tokens: int = 0
    calls: int = 0
    cost_usd: float | None = 0.0

    @property
    def total_tokens(self) -> int:
        return (
            self.input_tokens
            + self.output_tokens
            + self.cache_creation_input_tokens
            + self.cache_read_input_tokens
        )

    def add(self, other: Usage) -> None:
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.cache_creation_input_tokens += other.cache_creation_input_tokens
        self.cache_read_input_tokens += other.cache_read_input_tokens
        self.thinking_tokens += other.thinking_tokens
        self.calls += other.calls
        if self.cost_usd is None or other.cost_usd is None:
            self.cost_usd = None
        else:
            self.cost_usd += other.cost_usd

    def to_dict(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_creation_input_tokens": self.cache_creation_input_tokens,
            "cache_read_input_tokens": self.cache_read_input_tokens,
            "thinking_tokens": self.thinking_tokens,
            "total_tokens": self.total_tokens,
            "cost_usd": None if self.cost_usd is None else round(self.cost_usd, 6),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Usage:
        return cls(
            input_tokens=int(data.get("input_tokens", 0)),
            output_tokens=int(data.get("output_tokens", 0)),
            cache_creation_input_tokens=int(data.get("cache_creation_input_tokens", 0)),
            cache_read_input_tokens=int(data.get("cache_read_input_tokens", 0)),
            thinking_tokens=int(data.get("thinking_tokens", 0)),
            calls=int(data.get("calls", 0)),
            cost_usd=data.get("cost_usd", 0.0),
        )


@dataclass
class LLMReply:
    """What one call returned: the forced tool call (None when the model did not make it)."""

    tool_call: ToolCall | None
    usage: Usage
    text: str = ""
    stop_reason: str | None = None


class LLM(Protocol):
    """A language model that answers through a forced tool call."""

    @property
    def model(self) -> str: ...

    async def call(
        self, system: str, messages: list[Message], tools: list[ToolSpec], force_tool: str
    ) -> LLMReply:
        """One request. `force_tool` names the tool the model must call. Raises `LLMError` when the
        backend cannot be used (bad key, unreachable, the SDK's retries exhausted)."""
        ...

    async def aclose(self) -> None: ...


@dataclass
class UsageMeter:
    """Tokens and dollars of one run, across every backend call."""

    total: Usage = field(default_factory=lambda: Usage(cost_usd=0.0))

    def add(self, usage: Usage) -> None:
        self.total.add(usage)


# --- prices -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Price:
    """US dollars per million tokens."""

    input: float
    output: float
    cache_write: float  # 5-minute cache writes (what `cache_control: ephemeral` buys)
    cache_read: float


# Source: Anthropic's pricing page, https://platform.claude.com/docs/en/about-claude/pricing
# ("Model pricing" table: base input, 5m cache writes, cache hits, output), read 2026. Thinking
# tokens are billed as output tokens and are already inside `output_tokens`.
# Prefixes match dated ids too (claude-haiku-4-5-20251001).
PRICES: dict[str, Price] = {
    "claude-fable-5-2": Price(10.0, 50.0, 12.5, 0.25),
    "claude-mythos-5-2": Price(10.0, 50.0, 12.5, 0.25),
    "claude-fable-5-1": Price(10.0, 50.0, 12.5, 0.25),
    "claude-mythos-5-1": Price(10.0, 50.0, 12.5, 0.25),
    "claude-fable-5": Price(10.0, 50.0, 12.5, 1.0),
    "claude-mythos-5": Price(10.0, 50.0, 12.5, 1.0),
    "claude-opus-5-5": Price(4.0, 20.0, 5.0, 0.20),
    "claude-opus-5": Price(5.0, 25.0, 6.25, 0.50),
    "claude-opus-4-8": Price(5.0, 25.0, 6.25, 0.50),
    "claude-opus-4-7": Price(5.0, 25.0, 6.25, 0.50),
    "claude-opus-4-6": Price(5.0, 25.0, 6.25, 0.50),
    "claude-opus-4-5": Price(5.0, 25.0, 6.25, 0.50),
    "claude-sonnet-5-5": Price(2.0, 10.0, 2.5, 0.10),
    "claude-sonnet-5": Price(2.0, 10.0, 2.5, 0.20),
    "claude-sonnet-4-6": Price(3.0, 15.0, 3.75, 0.30),
    "claude-sonnet-4-5": Price(3.0, 15.0, 3.75, 0.30),
    "claude-haiku-5-5": Price(0.10, 0.50, 0.125, 0.01),
    "claude-haiku-4-5": Price(1.0, 5.0, 1.25, 0.10),
}


def price_for(model: str) -> Price | None:
    """The price of a model id; the longest matching prefix wins. None when unknown."""
    best: tuple[int, Price] | None = None
    for prefix, price in PRICES.items():
        if model.startswith(prefix) and (best is None or len(prefix) > best[0]):
            best = (len(prefix), price)
    return best[1] if best else None


def cost_of(model: str, usage: Usage) -> float | None:
    price = price_for(model)
    if price is None:
        return None
    return (
        usage.input_tokens * price.input
        + usage.output_tokens * price.output
        + usage.cache_creation_input_tokens * price.cache_write
        + usage.cache_read_input_tokens * price.cache_read
    ) / 1e6


# --- the answer tools -------------------------------------------------------------------------

SUBMIT_KERNEL = ToolSpec(
    name="submit_kernel",
    description=(
        "Submit one complete Python module: imports, the @triton.jit kernel(s), and class ModelNew "
        "(same __init__ arguments as Model) whose forward launches the kernel(s). The module must run "
        "as is; no placeholders, no markdown fences."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "code": {"type": "string", "description": "The whole candidate module, as Python source."},
            "notes": {
                "type": "string",
                "description": "One or two sentences: what this kernel does differently.",
            },
        },
        "required": ["code"],
    },
)

SUBMIT_EDITS = ToolSpec(
    name="submit_edits",
    description=(
        "Submit edits to the current kernel. Each edit replaces the exact text `old` (which must occur "
        "exactly once in the current kernel, whitespace included) by `new`. Edits apply in order."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "edits": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "properties": {
                        "old": {
                            "type": "string",
                            "description": "Exact text to replace; unique in the kernel.",
                        },
                        "new": {"type": "string", "description": "Replacement text."},
                    },
                    "required": ["old", "new"],
                },
            }
        },
        "required": ["edits"],
    },
)

PROPOSE_RULE = ToolSpec(
    name="propose_rule",
    description=(
        "Give one sentence starting 'You cannot' that states the constraint the failed kernel broke, "
        "minimal and grounded in the error log, with no fix and no explanation; or exactly "
        "'no guidance' when the log does not show a clear constraint."
    ),
    input_schema={
        "type": "object",
        "properties": {"text": {"type": "string", "description": "'You cannot …' or 'no guidance'."}},
        "required": ["text"],
    },
)

PROPOSE_IMPROVEMENTS = ToolSpec(
    name="propose_improvements",
    description="Give 1 to 3 concrete, specific improvements to make to the current kernel, most promising first.",
    input_schema={
        "type": "object",
        "properties": {
            "items": {
                "type": "array",
                "minItems": 1,
                "maxItems": 3,
                "items": {"type": "string"},
                "description": "Each item: what to change and why it should help, one or two sentences.",
            }
        },
        "required": ["items"],
    },
)

ANSWER_TOOLS: tuple[ToolSpec, ...] = (SUBMIT_KERNEL, SUBMIT_EDITS, PROPOSE_RULE, PROPOSE_IMPROVEMENTS)
