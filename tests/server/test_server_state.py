"""`open_app_state`: what the server's lifespan and the `tree` commands open, and how it closes."""

from __future__ import annotations

from pathlib import Path

import pytest
from search_scripted import TASK, ScriptedEvaluator

from kernelcraft.base.config import Settings
from kernelcraft.base.errors import StoreError
from kernelcraft.base.knobs import Knobs
from kernelcraft.knowledge.docs import HwDocs
from kernelcraft.server.state import open_app_state
from kernelcraft.store import Store


class ClosingEvaluator(ScriptedEvaluator):
    """A scripted evaluator that notes when it is closed."""

    def __init__(self, closed: list[str]) -> None:
        super().__init__()
        self.closed = closed

    async def aclose(self) -> None:
        self.closed.append("evaluator")


@pytest.fixture
def closed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What was closed, in order: the evaluator and the store."""
    order: list[str] = []
    real_aclose = Store.aclose

    async def aclose(self: Store) -> None:
        order.append("store")
        await real_aclose(self)

    monkeypatch.setattr(Store, "aclose", aclose)
    return order


@pytest.mark.anyio
async def test_open_app_state_wires_every_layer_to_one_store_and_closes_in_reverse_order(
    tmp_path: Path, closed: list[str]
) -> None:
    settings = Settings.from_knobs(Knobs(), tmp_path / "kc.db")
    async with open_app_state(settings, lambda _: ClosingEvaluator(closed)) as state:
        assert state.settings is settings and isinstance(state.evaluator, ClosingEvaluator)
        assert state.search.store is state.store and state.rulebook.store is state.store
        assert state.search.evaluator is state.evaluator and state.search.rulebook is state.rulebook
        assert await state.rulebook.list_rules(), "the seed rules are imported on first start"
        assert await state.docs.list_sections(), "the hardware manuals are indexed"
        started = await state.search.start(TASK, budget=1)
        assert started.next_step is not None
        assert closed == []
    assert closed == ["evaluator", "store"]


@pytest.mark.anyio
async def test_open_app_state_closes_what_it_opened_when_opening_fails_half_way(
    tmp_path: Path, closed: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken_index(self: HwDocs) -> None:
        raise StoreError("the manuals' index is broken")

    monkeypatch.setattr(HwDocs, "index", broken_index)
    settings = Settings.from_knobs(Knobs(), tmp_path / "kc.db")
    with pytest.raises(StoreError, match="index is broken"):
        async with open_app_state(settings, lambda _: ClosingEvaluator(closed)):
            pytest.fail("a state that failed to open was entered")
    assert closed == ["evaluator", "store"]
