"""How the rulebook counts, as AdaExplore does: duplicates judged by a model when there is one (a
fake one here: the model is the only thing injected), one failure counted once through its rule,
wrong results recorded but counted toward no rule."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from search_scripted import TASK, ScriptedEvaluator, candidate

from kernelcraft.base.errors import LLMError
from kernelcraft.knowledge.dedup import judge_prompt, read_judgement
from kernelcraft.knowledge.rulebook import Rulebook
from kernelcraft.knowledge.text import is_near_duplicate, normalize_rule
from kernelcraft.search.service import SearchService
from kernelcraft.store import Store

FLOAT32 = "You cannot call tl.float32 as a function inside a Triton kernel."
PARAPHRASE = "You cannot convert a value by writing tl.float32(x) in Triton code."


class FakeJudge:
    """Answers every prompt with `answer` (or raises `error`), and keeps the prompts."""

    def __init__(self, answer: str = "", error: Exception | None = None) -> None:
        self.answer = answer
        self.error = error
        self.prompts: list[str] = []

    async def __call__(self, prompt: str) -> str:
        self.prompts.append(prompt)
        if self.error is not None:
            raise self.error
        return self.answer


def verdict(is_duplicate: bool, index: int | None, confidence: float) -> str:
    body = {"is_duplicate": is_duplicate, "matched_index": index, "confidence": confidence, "reason": "r"}
    return f"Here you go:\n{json.dumps(body)}\n"


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    s = await Store.open(tmp_path / "kc.db")
    yield s
    await s.aclose()


def test_the_paraphrase_is_one_text_similarity_misses() -> None:
    assert not is_near_duplicate(normalize_rule(FLOAT32), normalize_rule(PARAPHRASE))


@pytest.mark.anyio
async def test_a_paraphrased_rule_is_merged_when_the_model_judge_says_it_duplicates_one(store: Store) -> None:
    judge = FakeJudge(verdict(True, 1, 0.9))
    rb = Rulebook(store, judge=judge)
    first = await rb.record_failure("k1", "TypeError", rule=FLOAT32, client="alice")
    assert not judge.prompts  # nothing to compare with yet
    second = await rb.record_failure("k2", "TypeError", rule=PARAPHRASE, client="bob")
    assert first.rule is not None and second.rule is not None
    assert second.rule_action == "incremented" and second.rule.id == first.rule.id and second.rule.count == 2
    assert [r.text for r in await rb.list_rules()] == [FLOAT32]
    # AdaExplore's prompt: every existing item numbered, the new one, a JSON answer
    assert judge.prompts == [judge_prompt(PARAPHRASE, [FLOAT32])]
    assert f"Existing Item 1:\n{FLOAT32}" in judge.prompts[0]
    assert f"NEW Knowledge Item to Check:\n{PARAPHRASE}" in judge.prompts[0]
    assert '"is_duplicate": true/false' in judge.prompts[0]


@pytest.mark.anyio
async def test_the_judge_decides_and_only_above_confidence_one_half(store: Store) -> None:
    near = "You cannot call tl.float32 as a function in a Triton kernel."  # the same, by text
    assert is_near_duplicate(normalize_rule(FLOAT32), normalize_rule(near))
    rb = Rulebook(store, judge=FakeJudge(verdict(True, 1, 0.5)))
    await rb.record_failure("k1", "e", rule=FLOAT32, client="alice")
    half = await rb.record_failure("k2", "e", rule=near, client="bob")
    rb.judge = FakeJudge(verdict(False, None, 0.95))
    not_dup = await rb.record_failure("k3", "e", rule=PARAPHRASE, client="bob")
    assert half.rule_action == "created" and not_dup.rule_action == "created"
    assert len(await rb.list_rules()) == 3


@pytest.mark.anyio
async def test_without_a_judge_or_when_it_fails_text_similarity_decides(store: Store) -> None:
    near = "You cannot call tl.float32 as a function in a Triton kernel."
    plain = Rulebook(store)
    await plain.record_failure("k1", "e", rule=FLOAT32, client="alice")
    by_text = await plain.record_failure("k2", "e", rule=near, client="bob")
    failing = FakeJudge(error=LLMError("the model is overloaded"))
    flaky = Rulebook(store, judge=failing)
    after_failure = await flaky.record_failure("k3", "e", rule=near, client="carol")
    paraphrase = await plain.record_failure("k4", "e", rule=PARAPHRASE, client="carol")
    assert by_text.rule_action == "incremented" and after_failure.rule_action == "incremented"
    assert len(failing.prompts) == 1 and paraphrase.rule_action == "created"


def test_the_judges_answer_is_read_as_adaexplore_reads_it() -> None:
    assert read_judgement(verdict(True, 2, 0.8), 3) == (1, 0.8)
    assert read_judgement(verdict(True, 4, 0.8), 3) is None  # no such item
    assert read_judgement(verdict(False, 2, 0.8), 3) is None
    assert read_judgement("true, it is a duplicate of item 2", 3) == (1, 0.7)  # AdaExplore's fallback
    assert read_judgement("no idea", 3) is None
    assert read_judgement('{"is_duplicate": true, "matched_index": 1}', 1) == (0, 0.5)


@pytest.mark.anyio
async def test_one_failure_counts_once_through_its_rule_and_a_wrong_result_counts_toward_none(
    store: Store,
) -> None:
    rulebook = Rulebook(store)
    await rulebook.import_seed()
    seeds = {r.uid: r.count for r in await rulebook.list_rules()}
    svc = SearchService(store, ScriptedEvaluator(), rulebook)
    started = await svc.start(TASK, budget=4)
    assert started.next_step is not None
    broken = await svc.submit(started.tree.id, started.next_step.node_id, candidate("compile", "tl.tanh"))
    # the tree recorded the failure (a compile_unknown_api, which a seed rule covers): nothing counted
    assert (
        broken.node.failure_id is not None and {r.uid: r.count for r in await rulebook.list_rules()} == seeds
    )
    rule = "You cannot call tl.tanh in a Triton kernel."
    once = await rulebook.record_failure("x", "x", rule=rule, failure_id=broken.node.failure_id)
    twice = await rulebook.record_failure("x", "x", rule=rule, failure_id=broken.node.failure_id)
    assert once.rule is not None and once.rule.count == 1 and twice.rule is not None and twice.rule.count == 1
    assert twice.rule_action == "linked"
    assert broken.next_step is not None
    wrong = await svc.submit(started.tree.id, broken.next_step.node_id, candidate("wrong", "off by one"))
    assert wrong.node.failure_class is not None and wrong.node.failure_class.value == "numerical_mismatch"
    proposed = "You cannot add the inputs with an offset of one."
    mismatch = await rulebook.record_failure("x", "x", rule=proposed, failure_id=wrong.node.failure_id)
    assert (
        mismatch.rule_action == "none" and mismatch.rule is None and "wrong result" in (mismatch.note or "")
    )
    assert proposed not in [r.text for r in await rulebook.list_rules()]
    failures = await store.conn.execute_fetchall("SELECT class FROM failures ORDER BY id")
    assert [r[0] for r in failures] == ["compile_unknown_api", "numerical_mismatch"]
