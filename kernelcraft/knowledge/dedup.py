"""Is a proposed rule a duplicate of an existing one? AdaExplore asks a model; without one, text.

AdaExplore's `skill_memory/deduplicate_knowledge.py` (`llm_judge_duplicate_batch`) shows the model
every existing rule and the new one in one prompt and reads back a JSON object; the new rule is a
duplicate of the matched one when the model says so with confidence above 0.5. This module keeps
that prompt and that reading. The model itself is the only thing injected: a `RuleJudge` takes the
prompt and returns the model's text (a fake one in tests). Without a judge the rulebook falls back
on `text.is_near_duplicate`.
"""

from __future__ import annotations

import json
import re
from typing import Protocol

# AdaExplore counts a duplicate only above this confidence (`if confidence > 0.5`).
DUPLICATE_CONFIDENCE = 0.5
# Confidence AdaExplore assumes when the answer is not JSON but says "true … duplicate … N".
FALLBACK_CONFIDENCE = 0.7
# Existing rules shown in one prompt, at most (the most relevant ones when there are more).
MAX_JUDGED = 200


class RuleJudge(Protocol):
    """The model edge: the judge prompt in, the model's answer (text) out. Raises a
    `KernelcraftError` (an `LLMError`) when the model cannot be reached; the rule then counts as new."""

    async def __call__(self, prompt: str) -> str: ...


def judge_prompt(candidate: str, existing: list[str]) -> str:
    """AdaExplore's prompt, word for word, with the existing rules numbered from 1."""
    items = "\n\n".join(f"Existing Item {i + 1}:\n{text}" for i, text in enumerate(existing))
    return f"""You are an expert at identifying duplicate knowledge items. Your task is to determine if a new knowledge statement is a duplicate of any existing knowledge statements, even if worded differently.

Compare the NEW item against ALL existing items. Is the new item a duplicate of any existing item?

Important:
- matched_index should be the 1-based index (1, 2, 3, ...) of the existing item that matches, or null if no match
- Only mark as duplicate if they convey essentially the same information
- If multiple items seem similar, choose the one with the highest similarity
- Be strict: only mark as duplicate if the core meaning is identical

EXISTING Knowledge Items:
{items}

NEW Knowledge Item to Check:
{candidate}

Respond with ONLY a JSON object in this exact format:
{{"is_duplicate": true/false, "matched_index": <1-based index of matched item or null>, "confidence": 0.0-1.0, "reason": "brief explanation"}}
"""


def read_judgement(answer: str, n_existing: int) -> tuple[int, float] | None:
    """(0-based index of the matched rule, confidence), or None when the answer names no valid
    match; read as AdaExplore reads it (the first {...} object; a plain-text fallback)."""
    found = re.search(r"\{[^}]+\}", answer, re.DOTALL)
    if found is None:
        lower = answer.lower()
        numbers = re.findall(r"\d+", answer)
        if "true" in lower and "duplicate" in lower and numbers and 1 <= int(numbers[0]) <= n_existing:
            return int(numbers[0]) - 1, FALLBACK_CONFIDENCE
        return None
    try:
        result = json.loads(found.group())
    except json.JSONDecodeError:
        return None
    index = result.get("matched_index")
    if not result.get("is_duplicate") or not isinstance(index, int) or not 1 <= index <= n_existing:
        return None
    try:
        confidence = float(result.get("confidence", 0.5))
    except (TypeError, ValueError):
        return None
    return index - 1, confidence


def is_duplicate(judgement: tuple[int, float] | None) -> bool:
    return judgement is not None and judgement[1] > DUPLICATE_CONFIDENCE
