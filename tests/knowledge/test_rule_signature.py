"""Near-duplicate rules merge without a model by the failure behind them (issue 38): a rule
reworded from a seed rule, for a failure of the same class whose error points at the code both
name, is that rule; a rule for another failure is not."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from kernelcraft.knowledge.rulebook import Rulebook
from kernelcraft.knowledge.text import normalize_rule, same_signature
from kernelcraft.store import Store

TANH_ERROR = "AttributeError: module 'triton.language' has no attribute 'tanh'"
SEED_TANH = "You cannot call tl.tanh, tl.relu or tl.gelu because triton.language does not define them."
REWORDED = "You cannot call tl.tanh in a Triton kernel."


@pytest.fixture
async def rulebook(tmp_path: Path) -> AsyncIterator[Rulebook]:
    store = await Store.open(tmp_path / "kc.db")
    book = Rulebook(store)
    await book.import_seed()
    yield book
    await store.aclose()


@pytest.mark.anyio
async def test_a_rule_reworded_from_a_seed_rule_for_the_same_failure_counts_for_the_seed_rule(
    rulebook: Rulebook,
) -> None:
    before = len(await rulebook.list_rules())
    recorded = await rulebook.record_failure("k1", TANH_ERROR, rule=REWORDED, client="alice")
    assert recorded.rule_action == "incremented"
    assert len(await rulebook.list_rules()) == before
    seed = next(r for r in await rulebook.list_rules() if r.text == SEED_TANH)
    assert seed.count == 2


@pytest.mark.anyio
async def test_the_same_words_for_a_failure_pointing_elsewhere_stay_a_rule_of_their_own(
    rulebook: Rulebook,
) -> None:
    other = "AttributeError: module 'triton.language' has no attribute 'float32x'"
    recorded = await rulebook.record_failure("k1", other, rule=REWORDED, client="alice")
    assert recorded.rule_action == "created"


def test_a_signature_needs_one_class_shared_code_and_the_errors_name() -> None:
    a, b = normalize_rule(REWORDED), normalize_rule(SEED_TANH)
    assert same_signature(a, b, frozenset({"tl.tanh"}), True)
    assert not same_signature(a, b, frozenset({"tl.tanh"}), False)  # another failure class
    assert not same_signature(a, b, frozenset(), True)  # the error points at nothing
    plain = normalize_rule("You cannot use a lambda inside a Triton kernel.")
    assert not same_signature(plain, b, frozenset({"tl.tanh"}), True)  # names no code
