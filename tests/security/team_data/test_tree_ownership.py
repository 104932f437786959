"""Threat: a client steps, submits into, abandons or reads another client's search tree (its
kernels are that client's work). A tree belongs to the client that started it (docs/security.md)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[2]))
sys.path.insert(0, str(Path(__file__).parents[2] / "search"))  # test_search_tree's service()
from search_scripted import TASK, candidate  # noqa: E402
from test_search_tree import service  # noqa: E402

from kernelcraft.base.errors import NotFoundError  # noqa: E402


@pytest.mark.anyio
async def test_another_client_cannot_step_submit_abandon_or_read_a_tree(tmp_path: Path) -> None:
    async with service(tmp_path / "kc.db") as svc:
        r = await svc.start(TASK, seed_candidate=candidate("correct 1.0"), budget=4, client="alice")
        assert r.next_step is not None
        node = r.next_step.node_id
        attempts = {
            "submit": svc.submit(r.tree.id, node, candidate("correct 9.0"), client="mallory"),
            "abandon": svc.abandon(r.tree.id, node, "mallory gave up", client="mallory"),
            "next": svc.next_step(r.tree.id, client="mallory"),
            "status": svc.status(r.tree.id, client="mallory"),
            "show": svc.show(r.tree.id, client="mallory"),
        }
        for name, attempt in attempts.items():
            with pytest.raises(NotFoundError, match="belongs to another client"):
                await attempt
            assert name
        # alice's tree is as she left it: her step is still hers, nothing was evaluated for mallory
        st = await svc.status(r.tree.id, client="alice")
        view = await svc.show(r.tree.id, client="alice")
    assert st.next_step is not None and st.next_step.node_id == node
    assert [n.id for n in view.nodes if n.status == "evaluated" and not n.seed and n.kind != "root"] == []


@pytest.mark.anyio
async def test_an_owner_shares_a_tree_for_reading_only(tmp_path: Path) -> None:
    async with service(tmp_path / "kc.db") as svc:
        r = await svc.start(TASK, seed_candidate=candidate("correct 1.0"), budget=4, client="alice")
        assert r.next_step is not None
        tree, node = r.tree.id, r.next_step.node_id
        with pytest.raises(NotFoundError, match="belongs to another client"):
            await svc.share(tree, "mallory", client="mallory")  # only the owner shares
        assert await svc.share(tree, "bob", client="alice") == ["bob"]
        assert (await svc.show(tree, client="bob")).tree.id == tree  # bob reads
        for attempt in (
            svc.submit(tree, node, candidate("correct 9.0"), client="bob"),
            svc.abandon(tree, node, "bob gave up", client="bob"),
            svc.status(tree, client="bob"),
            svc.share(tree, "carol", client="bob"),
        ):
            with pytest.raises(NotFoundError, match="belongs to another client"):
                await attempt  # reading only: the steps stay alice's
        with pytest.raises(NotFoundError, match="has not shared it with you"):
            await svc.show(tree, client="carol")
        assert await svc.share(tree, "*", client="alice") == ["*", "bob"]
        assert (await svc.show(tree, client="carol")).tree.id == tree
