"""Which language model the flags ask for, checked before any work, and the backend built from it.

`.env`: `load_dotenv()` reads `./.env` (python-dotenv) when the file exists. A variable already set
in the environment wins; the file never overrides it.

`check_llm` is the pre-flight check (a missing key or model name is an `LLMSetupError`, a usage
error, raised before any work); `make_llm` builds the backend (`anthropic_backend`,
`openai_backend`, imported only when asked for) and never falls back to something else.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from kernelcraft.agent.llm.core import DEFAULT_ANTHROPIC_MODEL, LLM, SDK_MAX_RETRIES
from kernelcraft.base.errors import LLMSetupError

LLMKind = Literal["anthropic", "openai", "none"]


def load_dotenv(path: Path | None = None) -> list[str]:
    """Read `path` (default `./.env`) with python-dotenv into os.environ, never overriding a
    variable that is already set. Returns the names it set."""
    from dotenv import dotenv_values

    path = path or Path.cwd() / ".env"
    if not path.is_file():
        return []
    loaded = []
    for key, value in dotenv_values(path, encoding="utf-8").items():
        if value is not None and key not in os.environ:
            os.environ[key] = value
            loaded.append(key)
    return loaded


def require_env(name: str, *, backend: str, hint: str) -> str:
    value = os.environ.get(name, "").strip()
    if not value:
        raise LLMSetupError(
            f"the {backend} backend needs an API key in ${name}, which is not set. {hint} "
            "Or run with --llm none to use the offline tuner only."
        )
    return value


@dataclass(frozen=True)
class LLMConfig:
    kind: LLMKind = "anthropic"
    model: str | None = None
    base_url: str | None = None
    api_key_env: str | None = None
    max_tokens: int = 16_384
    thinking_budget: int | None = None
    sdk_max_retries: int = SDK_MAX_RETRIES
    timeout_s: float = 600.0


def check_llm(config: LLMConfig) -> str | None:
    """The API key the flags ask for (None for `--llm none`), or an `LLMSetupError` saying what is
    missing: the key's variable, the model name, a thinking budget that cannot work. Builds
    nothing: the pre-flight check of `optimize` and `adapt`, and the first step of `make_llm`."""
    if config.kind == "none":
        return None
    if config.kind not in ("anthropic", "openai"):
        raise LLMSetupError(f"unknown --llm {config.kind!r}: choose anthropic, openai or none")
    if config.kind == "anthropic":
        budget = config.thinking_budget
        if budget is not None and not 1024 <= budget < config.max_tokens:
            raise LLMSetupError(
                f"--thinking-budget {budget} must be at least 1024 and below --max-output-tokens "
                f"{config.max_tokens}"
            )
        env = config.api_key_env or "ANTHROPIC_API_KEY"
        return require_env(
            env,
            backend="Anthropic",
            hint=f"Export it (export {env}=sk-ant-...) or put {env}=... in a .env file in this directory.",
        )
    if not config.model:
        raise LLMSetupError("the OpenAI-compatible backend needs --model (the model name your server serves)")
    env = config.api_key_env or "OPENAI_API_KEY"
    if env.lower() == "none":
        return "unused"  # local servers (vLLM, Ollama, llama.cpp) that check no key
    return require_env(
        env,
        backend="OpenAI-compatible",
        hint="Export it, name another variable with --api-key-env VAR, or pass --api-key-env none "
        "for a local server that checks no key.",
    )


def make_llm(config: LLMConfig) -> LLM | None:
    """Build the backend the flags ask for; None for `--llm none`. Never falls back silently."""
    key = check_llm(config)
    if key is None:
        return None
    if config.kind == "anthropic":
        from kernelcraft.agent.llm.anthropic_backend import AnthropicLLM

        return AnthropicLLM.create(
            api_key=key,
            model=config.model or DEFAULT_ANTHROPIC_MODEL,
            base_url=config.base_url,
            max_tokens=config.max_tokens,
            thinking_budget=config.thinking_budget,
            sdk_max_retries=config.sdk_max_retries,
            timeout_s=config.timeout_s,
        )
    from kernelcraft.agent.llm.openai_backend import OpenAICompatibleLLM

    assert config.model is not None  # check_llm refused an OpenAI-compatible backend without one
    return OpenAICompatibleLLM.create(
        api_key=key,
        model=config.model,
        base_url=config.base_url,
        max_tokens=config.max_tokens,
        sdk_max_retries=config.sdk_max_retries,
        timeout_s=config.timeout_s,
    )
