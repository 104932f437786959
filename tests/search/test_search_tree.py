"""The search service over SQLite: steps, verdicts, back-propagation, concurrency, resume, errors.

Candidates are judged by `ScriptedEvaluator` (their verdict is written in them) so that a tree can
be driven through known outcomes quickly; one test runs the real `LocalEvaluator` in Triton's
interpreter.
"""

from __future__ import annotations

import asyncio
import json
import os
import selectors
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from search_scripted import TASK, ScriptedEvaluator, candidate

from kernelcraft.base.errors import BudgetError, NotFoundError, TaskError, UsageError
from kernelcraft.knowledge.docs import HwDocs
from kernelcraft.knowledge.rulebook import Rulebook
from kernelcraft.schema.tree import NextStep, TreeStatus
from kernelcraft.search.policy import reward_for
from kernelcraft.search.repository import ancestors, siblings
from kernelcraft.search.service import SearchService
from kernelcraft.store import Store, code_hash

REPO = Path(__file__).resolve().parents[2]


class Clock:
    """A clock the test moves by hand (lease expiry without sleeping)."""

    def __init__(self) -> None:
        self.t = datetime(2026, 1, 1, tzinfo=timezone.utc)

    def __call__(self) -> datetime:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += timedelta(seconds=seconds)


@asynccontextmanager
async def service(
    db: Path | str,
    *,
    gpu: bool = False,
    clock: Clock | None = None,
    seed_rules: bool = False,
    manuals: bool = False,
) -> AsyncIterator[SearchService]:
    store = await Store.open(db)
    try:
        rulebook = Rulebook(store)
        if seed_rules:
            await rulebook.import_seed()
        docs = HwDocs(store)
        if manuals:
            await docs.index()
        yield SearchService(store, ScriptedEvaluator(has_gpu=gpu), rulebook, docs=docs, clock=clock)
    finally:
        await store.aclose()


def scripted(svc: SearchService) -> ScriptedEvaluator:
    assert isinstance(svc.evaluator, ScriptedEvaluator)
    return svc.evaluator


# -------------------------------------------------------------------------------- basic steps


@pytest.mark.anyio
async def test_start_without_a_seed_hands_out_a_large_step_from_the_root(tmp_path):
    async with service(tmp_path / "kc.db") as svc:
        r = await svc.start(TASK, task_name="add.py", budget=5)
        view = await svc.show(r.tree.id)
    step = r.next_step
    assert step is not None and step.kind == "large" and step.pool == [] and step.start_code is None
    assert step.parent_id == view.nodes[0].id and view.nodes[0].kind == "root"
    assert [n.status for n in view.nodes] == ["evaluated", "pending"]
    assert "the root always gets a large step" in step.reason
    assert "Submit the module for tree" in step.instructions and "ModelNew" in step.instructions
    assert step.task_source == TASK and r.tree.params["c"] == 0.3 and r.tree.params["c_exp"] == 0.3


@pytest.mark.anyio
async def test_submit_records_the_verdict_back_propagates_and_hands_out_the_next_step(tmp_path):
    verdicts = ["correct 2.0", "wrong", "compile", "correct 3.0", "correct 0.5"]
    async with service(tmp_path / "kc.db", gpu=True) as svc:
        r = await svc.start(TASK, seed_candidate=candidate("correct 1.5"), budget=10)
        step = r.next_step
        results = []
        for v in verdicts:
            assert step is not None
            res = await svc.submit(r.tree.id, step.node_id, candidate(v))
            results.append(res)
            step = res.next_step
        view = await svc.show(r.tree.id)
        paths = {n.id: await ancestors(svc.store.conn, n.id) for n in view.nodes}
        sibs = await siblings(svc.store.conn, results[0].node.id)
    assert [x.node.outcome for x in results] == ["correct", "wrong", "not_compiled", "correct", "correct"]
    assert results[0].node.speedup == 2.0 and results[0].new_best
    assert results[0].node.reward == pytest.approx(reward_for("correct", 2.0))
    assert [x.budget_left for x in results] == [9, 8, 7, 6, 5]
    evaluated = {n.id: n for n in view.nodes if n.status == "evaluated"}
    # Every node's visits and value are those of its evaluated subtree (itself included).
    for n in evaluated.values():
        below = [m for m in evaluated.values() if n.id in paths[m.id] and m.kind != "root"]
        assert n.visits == len(below)
        assert n.mean_value * n.visits == pytest.approx(sum(m.reward or 0 for m in below))
        assert n.max_reward == pytest.approx(max((m.reward or 0 for m in below), default=0))
    assert view.best_node_id == results[3].node.id  # 3.0× is the best
    assert paths[results[0].node.id][0] == view.nodes[0].id  # ancestors: root first
    node0 = evaluated[results[0].node.id]
    assert sibs == [n.id for n in view.nodes if n.parent_id == node0.parent_id and n.id != node0.id]


@pytest.mark.anyio
async def test_on_a_cpu_only_correctness_is_checked_and_the_speedup_is_unknown(tmp_path):
    async with service(tmp_path / "kc.db", gpu=False) as svc:
        r = await svc.start(TASK, budget=3)
        assert r.next_step is not None
        res = await svc.submit(r.tree.id, r.next_step.node_id, candidate("correct 4.0"))
        jobs = scripted(svc).jobs
    assert jobs[-1].stages == ["verify"]
    assert res.node.outcome == "correct" and res.node.speedup is None
    assert res.node.reward == pytest.approx(reward_for("correct", 1.0))
    assert "speedup unknown" in res.message and r.next_step is not None
    assert "speedup unknown: no GPU" in r.next_step.instructions  # the step says it (issue 38)
    assert res.next_step is not None and not res.next_step.speedup_measured
    assert "speedup unknown: no GPU" in res.next_step.instructions


@pytest.mark.anyio
async def test_on_a_gpu_candidates_are_compiled_verified_and_profiled_for_the_target(tmp_path):
    async with service(tmp_path / "kc.db", gpu=True) as svc:
        r = await svc.start(TASK, budget=3, target="sm_80")
        assert r.next_step is not None
        res = await svc.submit(r.tree.id, r.next_step.node_id, candidate("correct 2.5"))
        jobs = scripted(svc).jobs
    assert jobs[-1].stages == ["compile", "verify", "profile"] and jobs[-1].targets == ["sm_80"]
    assert res.node.speedup == 2.5 and res.node.candidate_us == pytest.approx(40.0)
    assert "2.50× vs PyTorch" in res.message


@pytest.mark.anyio
async def test_a_failed_candidate_is_recorded_in_the_rulebook_with_class_code_and_error(tmp_path):
    bad = candidate("compile", "uses tl.tanh")
    async with service(tmp_path / "kc.db") as svc:
        r = await svc.start(TASK, budget=3, client="alice")
        assert r.next_step is not None
        await svc.submit(r.tree.id, r.next_step.node_id, bad, client="alice")
        rows = await svc.store.conn.execute_fetchall(
            "SELECT class, error_text, code_hash, task_hash, arch, client FROM failures"
        )
        rows = [tuple(x) for x in rows]
    assert rows == [
        (
            "compile_unknown_api",
            "AttributeError: module 'triton.language' has no attribute 'tanh'",
            code_hash(bad),
            r.tree.task_hash,
            "sm_90a",
            "alice",
        )
    ]


@pytest.mark.anyio
async def test_a_failed_node_names_its_rulebook_failure_so_a_proposed_rule_attaches_to_it(tmp_path):
    bad = candidate("compile", "uses tl.tanh")
    rule = "You cannot use tl.tanh in a Triton kernel."
    async with service(tmp_path / "kc.db") as svc:
        r = await svc.start(TASK, budget=3)
        assert r.next_step is not None
        sub = await svc.submit(r.tree.id, r.next_step.node_id, bad)
        assert sub.node.failure_id is not None
        rec = await svc.rulebook.record_failure(bad, "ignored", rule=rule, failure_id=sub.node.failure_id)
        n = await svc.store.conn.execute_fetchall("SELECT count(*) FROM failures")
        n_failures = n[0][0]
    assert n_failures == 1  # the driver's rule did not record the failure a second time
    assert rec.failure_id == sub.node.failure_id and rec.rule is not None and rec.rule.count == 1


# ------------------------------------------------------------------------------------ abandon


@pytest.mark.anyio
async def test_an_abandoned_step_fails_without_an_evaluation_or_a_rulebook_entry_and_the_other_kind_follows(
    tmp_path,
):
    # p_large = 0 and c_exp = 0: the first step is small from the seed, and selection descends.
    reason = "the tuner's edits did not apply: old text 'BLOCK = 64' not found"
    async with service(tmp_path / "kc.db") as svc:
        r = await svc.start(
            TASK,
            seed_candidate=candidate("correct"),
            params={"p_large": 0.0, "c_exp": 0.0},
            budget=5,
            client="alice",
        )
        assert r.next_step is not None
        jobs_before = len(scripted(svc).jobs)
        res = await svc.abandon(r.tree.id, r.next_step.node_id, reason, client="alice")
        jobs_after = len(scripted(svc).jobs)
        failures = (await svc.store.conn.execute_fetchall("SELECT count(*) FROM failures"))[0][0]
        view = await svc.show(r.tree.id)
        st = await svc.status(r.tree.id, client="alice")
    assert r.seed_node is not None and r.next_step is not None
    assert jobs_after == jobs_before and failures == 0
    node = res.node
    assert node.abandoned and node.status == "evaluated" and node.outcome == "not_compiled"
    assert node.reward == 0.0 and node.error == reason and node.code_hash is None and node.client == "alice"
    assert node.failure_class is None and node.failure_id is None and node.verdict is None
    assert not res.new_best and res.best is not None and res.best.id == r.seed_node.id
    assert res.budget_left == 4 and "abandoned without a candidate" in res.message
    nodes = {n.id: n for n in view.nodes}
    root = view.nodes[0]
    assert root.visits == 2 and nodes[r.seed_node.id].visits == 2  # the seed's visit and the abandoned step
    assert view.best_node_id == r.seed_node.id
    # after a failed small step from the seed, a large one; the abandoned node itself is never expanded
    step = res.next_step
    assert step is not None and step.parent_id == r.seed_node.id and step.kind == "large"
    assert "abandoned without a candidate" in step.reason
    assert st.counts.not_compiled == 1 and st.budget_used == 1


@pytest.mark.anyio
async def test_abandon_refuses_what_submit_refuses_and_an_empty_reason(tmp_path):
    clock = Clock()
    async with service(tmp_path / "kc.db", clock=clock) as svc:
        a = await svc.start(TASK, budget=2)
        b = await svc.start(TASK, budget=2, params={"warm_start": False})
        assert a.next_step is not None and b.next_step is not None
        with pytest.raises(NotFoundError, match="no search tree 999"):
            await svc.abandon(999, a.next_step.node_id, "x")
        with pytest.raises(NotFoundError, match="no node 12345"):
            await svc.abandon(a.tree.id, 12345, "x")
        with pytest.raises(UsageError, match=f"belongs to tree {b.tree.id}, not tree {a.tree.id}"):
            await svc.abandon(a.tree.id, b.next_step.node_id, "x")
        with pytest.raises(UsageError, match="is the root"):
            await svc.abandon(a.tree.id, a.next_step.parent_id, "x")
        with pytest.raises(UsageError, match="reason is empty"):
            await svc.abandon(a.tree.id, a.next_step.node_id, " \n")
        first = await svc.abandon(a.tree.id, a.next_step.node_id, "the model wrote no ModelNew")
        with pytest.raises(UsageError, match="already has a verdict"):
            await svc.abandon(a.tree.id, a.next_step.node_id, "again")
        with pytest.raises(UsageError, match="already has a verdict"):
            await svc.submit(a.tree.id, a.next_step.node_id, candidate("correct"))
        assert first.next_step is not None
        last = await svc.abandon(a.tree.id, first.next_step.node_id, "nothing again")
        # a lapsed step whose budget another client spent is refused, as a late submit is
        c = await svc.start(TASK, budget=1, params={"lease_seconds": 10, "warm_start": False})
        assert c.next_step is not None
        clock.advance(11)
        other, _ = await svc.next_step(c.tree.id)
        assert other is not None
        await svc.abandon(c.tree.id, other.node_id, "the other step gave up too")
        with pytest.raises(BudgetError, match="budget is spent: 1 of 1"):
            await svc.abandon(c.tree.id, c.next_step.node_id, "late")
        st = await svc.status(a.tree.id)
    assert first.best is None and first.budget_left == 1
    assert last.next_step is None and "budget is spent: 2 of 2" in (last.next_step_note or "")
    assert st.best is None and st.tree.status == "done" and st.counts.not_compiled == 2


# ---------------------------------------------------------------------------- step contexts


@pytest.mark.anyio
async def test_a_small_step_carries_the_chain_with_verdicts_errors_and_timings(tmp_path):
    # p_large = 0 and c_exp = 0: always small, always descend — root → seed → A → B.
    async with service(tmp_path / "kc.db", gpu=True, seed_rules=True) as svc:
        r = await svc.start(
            TASK, seed_candidate=candidate("correct 1.5"), params={"p_large": 0.0, "c_exp": 0.0}, budget=9
        )
        s1 = r.next_step
        assert s1 is not None
        a = await svc.submit(r.tree.id, s1.node_id, candidate("correct 2.0"))
        assert a.next_step is not None
        b = await svc.submit(r.tree.id, a.next_step.node_id, candidate("compile"))
    assert r.seed_node is not None
    assert s1.kind == "small" and s1.parent_id == r.seed_node.id and s1.start_code == candidate("correct 1.5")
    step = b.next_step
    assert step is not None and step.kind == "small" and step.parent_id == b.node.id
    assert [k.node_id for k in step.chain] == [r.seed_node.id, a.node.id, b.node.id]
    assert [k.outcome for k in step.chain] == ["correct", "correct", "not_compiled"]
    assert step.chain[1].speedup == 2.0 and step.chain[1].candidate_us == pytest.approx(50.0)
    assert (
        step.chain[2].failure_class is not None and step.chain[2].failure_class.value == "compile_unknown_api"
    )
    assert "no attribute 'tanh'" in (step.chain[2].error or "")
    assert step.start_code == candidate("compile")
    assert "Fix that failure first" in step.instructions and "SMALL STEP" in step.instructions
    assert step.rules and all(rule.status == "active" for rule in step.rules)
    # The rules' text is in `rules` alone (said once); the instructions point at it.
    assert step.rules[0].text not in step.instructions
    assert f"Follow the {len(step.rules)} rule(s) ranked most relevant to this step" in step.instructions


@pytest.mark.anyio
async def test_a_large_step_carries_the_pool_of_branch_bests_and_says_to_beat_them_all(tmp_path):
    # p_large = 1 and c_exp = 0: every step below the root is large and selection descends.
    async with service(tmp_path / "kc.db", gpu=True) as svc:
        r = await svc.start(
            TASK, seed_candidate=candidate("correct 1.5"), params={"p_large": 1.0, "c_exp": 0.0}, budget=9
        )
        assert r.next_step is not None
        l1 = await svc.submit(r.tree.id, r.next_step.node_id, candidate("correct 3.0"))
    assert r.seed_node is not None
    first = r.next_step
    assert first is not None and first.kind == "large" and [k.node_id for k in first.pool] == [r.seed_node.id]
    step = l1.next_step
    assert step is not None and step.kind == "large" and step.parent_id == l1.node.id
    assert [k.node_id for k in step.pool] == [r.seed_node.id, l1.node.id]
    assert step.speedup_to_beat == 3.0 and step.start_code is None
    assert "OUTPERFORMS every kernel in `pool`" in step.instructions and "3.00×" in step.instructions


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("preset", "said", "unsaid"),
    [
        ("adaexplore", "directly build upon any kernel in the pool", "Do not copy one and tweak it"),
        ("kernelcraft", "Do not copy one and tweak it", "build upon"),
    ],
)
async def test_a_large_step_builds_upon_the_pool_under_adaexplore_and_departs_from_it_under_kernelcraft(
    tmp_path, preset, said, unsaid
):
    async with service(tmp_path / "kc.db", gpu=True) as svc:
        r = await svc.start(
            TASK,
            seed_candidate=candidate("correct 1.5"),
            preset=preset,
            params={"p_large": 1.0, "c_exp": 0.0},
            budget=9,
        )
        assert r.next_step is not None and r.next_step.pool  # the seed is in the pool
    assert r.tree.params["pool_use"] == ("build_upon" if preset == "adaexplore" else "new_design")
    assert said in r.next_step.instructions and unsaid not in r.next_step.instructions


@pytest.mark.anyio
async def test_a_small_steps_chain_carries_each_versions_code_and_metrics_within_its_token_budget(tmp_path):
    # p_large = 0, c_exp = 0: root → seed → A → B, small steps; 500 tokens ≈ 2000 characters of code.
    pad = "x" * 800  # each version ≈ 830 characters: two fit, three do not
    seed, a_code, b_code = (
        candidate(v, f"{name} {pad}")
        for v, name in [("correct 1.5", "seed"), ("correct 2.0", "a"), ("compile", "b")]
    )
    params = {"p_large": 0.0, "c_exp": 0.0, "context_tokens": 500}
    async with service(tmp_path / "kc.db", gpu=True) as svc:
        r = await svc.start(TASK, seed_candidate=seed, params=params, budget=9)
        assert r.next_step is not None
        a = await svc.submit(r.tree.id, r.next_step.node_id, a_code)
        assert a.next_step is not None
        whole = a.next_step
        b = await svc.submit(r.tree.id, whole.node_id, b_code)
    assert r.seed_node is not None and [k.code for k in whole.chain] == [seed, a_code]
    step = b.next_step
    assert step is not None and [k.node_id for k in step.chain] == [r.seed_node.id, a.node.id, b.node.id]
    assert [k.code for k in step.chain[1:]] == [a_code, b_code] and step.start_code == b_code
    assert step.chain[0].code.startswith(
        f"# code of node {r.seed_node.id} left out: the chain's code is kept"
    )
    assert step.chain[0].outcome == "correct" and step.chain[0].speedup == 1.5  # its metrics stay
    assert (
        "within about 500 tokens, newest first; 1 older version(s) show their verdict only"
        in step.instructions
    )
    assert "2.00× vs PyTorch" in step.instructions and "no attribute 'tanh'" in step.instructions


@pytest.mark.anyio
async def test_best_pool_and_warm_start_rank_a_40x_kernel_above_an_earlier_12x_one(tmp_path):
    # Both clip to reward 1.6. p_large = 0, c_exp = 0: a small step from the 12× seed writes the 40×
    # kernel; the small step after it is abandoned, so the next step from it is large, with a pool.
    async with service(tmp_path / "kc.db", gpu=True) as svc:
        r = await svc.start(
            TASK, seed_candidate=candidate("correct 12"), params={"p_large": 0.0, "c_exp": 0.0}, budget=5
        )
        assert r.next_step is not None and r.seed_node is not None
        fast = await svc.submit(r.tree.id, r.next_step.node_id, candidate("correct 40"))
        assert fast.next_step is not None and fast.next_step.parent_id == fast.node.id
        gave_up = await svc.abandon(r.tree.id, fast.next_step.node_id, "no idea")
        st = await svc.status(r.tree.id)
        view = await svc.show(r.tree.id)
        again = await svc.start(TASK, budget=2)
    assert r.seed_node.reward == fast.node.reward == pytest.approx(1.6)
    assert fast.new_best and fast.best is not None and fast.best.id == fast.node.id
    assert st.best is not None and st.best.id == fast.node.id and view.best_node_id == fast.node.id
    large = gave_up.next_step
    assert large is not None and large.kind == "large" and large.parent_id == fast.node.id
    assert [k.node_id for k in large.pool] == [fast.node.id] and large.speedup_to_beat == 40.0
    assert again.warm_start is not None and again.warm_start.node_id == fast.node.id
    assert again.warm_start.speedup == 40.0


@pytest.mark.anyio
async def test_a_steps_instructions_carry_the_manual_sections_and_the_parents_profile(tmp_path):
    seed = candidate("correct 2.0", "profile: memory 0.62 spills 24\n    acc = tl.sum(tl.load(x_ptr + offs))")
    broken = candidate("compile", "tl.math.tanh(x)")
    params = {"p_large": 0.0, "c_exp": 0.0}
    async with service(tmp_path / "kc.db", gpu=True, manuals=True) as svc:
        r = await svc.start(TASK, seed_candidate=seed, params=params, budget=4, target="sm_90a")
        assert r.next_step is not None
        failed = await svc.submit(r.tree.id, r.next_step.node_id, broken)
        paper = await svc.start(TASK, seed_candidate=seed, preset="adaexplore", params=params, budget=2)
    step = r.next_step
    words = (
        "62% of the roofline floor (memory-bound: 31.0 µs at 4800 GB/s; 2976 GB/s achieved); "
        "kernel add_kernel: spills 24 registers"
    )
    assert step.parent_profile is not None and step.parent_profile.startswith(words)
    assert words in step.instructions and step.chain[-1].profile == step.parent_profile
    assert 2 <= len(step.manual_sections) <= 3
    for m in step.manual_sections:
        assert str(m.id) in step.instructions and m.arch in ("any", "sm_90a")
    headings = " | ".join(m.heading_path for m in step.manual_sections)
    assert "Reductions" in headings or "coalescing" in headings, headings
    # after a candidate that did not compile, the manuals that explain the failure come first
    after = failed.next_step
    assert after is not None and after.manual_sections
    assert "Constructs that fail" in after.manual_sections[0].heading_path
    # the adaexplore preset: neither manuals nor profiles, as in the paper; the tree says so
    assert paper.tree.params["preset"] == "adaexplore" and paper.tree.params["manual_sections"] == 0
    assert paper.next_step is not None and paper.next_step.manual_sections == []
    assert paper.next_step.parent_profile is None and "Hardware-manual" not in paper.next_step.instructions
    assert r.tree.params["preset"] == "kernelcraft" and "preset kernelcraft" in r.message


# -------------------------------------------------------------------------------------- replay

REPLAY_SCRIPT = ["correct 1.2", "wrong", "correct 2.0", "compile", "correct 0.8", "correct 2.5", "wrong"]


async def drive(db: Path, seed: int, steps: int = 14) -> list[tuple[int, str]]:
    """Run a tree for `steps` scripted steps; the sequence as (parent's position in the tree, kind)."""
    async with service(db, gpu=True) as svc:
        r = await svc.start(TASK, seed_candidate=candidate("correct 1.0"), budget=steps, seed=seed)
        step = r.next_step
        assert r.seed_node is not None and r.seed_node.parent_id is not None
        order: list[int] = [r.seed_node.parent_id, r.seed_node.id]
        seq: list[tuple[int, str]] = []
        for i in range(steps):
            assert step is not None
            seq.append((order.index(step.parent_id), step.kind))
            order.append(step.node_id)
            res = await svc.submit(
                r.tree.id, step.node_id, candidate(REPLAY_SCRIPT[i % len(REPLAY_SCRIPT)], str(i))
            )
            step = res.next_step
        return seq


@pytest.mark.anyio
async def test_the_same_seed_replays_the_same_sequence_of_steps(tmp_path):
    first = await drive(tmp_path / "a.db", seed=5)
    again = await drive(tmp_path / "b.db", seed=5)
    other = await drive(tmp_path / "c.db", seed=6)
    assert first == again
    assert first != other
    assert {k for _, k in first} == {"small", "large"}


# --------------------------------------------------------------------------------- concurrency


@pytest.mark.anyio
async def test_eight_concurrent_sessions_of_one_client_get_distinct_steps_and_no_node_is_lost(tmp_path):
    db = tmp_path / "kc.db"
    budget = 40

    async def client(tree_id: int, name: str, k: int, first: NextStep | None = None) -> list[int]:
        got: list[int] = []
        async with service(db, gpu=True) as svc:  # each client its own connection
            step = first or (await svc.next_step(tree_id, client="team"))[0]
            while step is not None:
                got.append(step.node_id)
                verdict = REPLAY_SCRIPT[(k + len(got)) % len(REPLAY_SCRIPT)]
                res = await svc.submit(
                    tree_id, step.node_id, candidate(verdict, f"{name}-{len(got)}"), client="team"
                )
                step = res.next_step
        return got

    async with service(db, gpu=True) as svc:
        r = await svc.start(TASK, seed_candidate=candidate("correct 1.0"), budget=budget, client="team")
    got = await asyncio.gather(
        *(client(r.tree.id, f"c{k}", k, r.next_step if k == 0 else None) for k in range(8))
    )
    async with service(db, gpu=True) as svc:
        view = await svc.show(r.tree.id)
        st = await svc.status(r.tree.id, client="team")
    handed = [n for g in got for n in g]
    assert len(handed) == len(set(handed)), "a step was handed to two sessions"
    evaluated = {n.id for n in view.nodes if n.status == "evaluated" and n.kind != "root" and not n.seed}
    assert set(handed) == evaluated, "a submitted node was lost"
    assert len(evaluated) == budget and not [n for n in view.nodes if n.status != "evaluated"]
    assert sum(len(g) > 0 for g in got) >= 2, "the clients did not run concurrently"
    assert view.nodes[0].visits == budget + 1  # every evaluation reached the root, the seed's too
    assert st.budget_left == 0 and st.next_step is None and "budget is spent" in (st.next_step_note or "")


# ----------------------------------------------------------------------------------- leases


@pytest.mark.anyio
async def test_a_late_submit_for_a_lapsed_lease_still_counts(tmp_path):
    clock = Clock()
    async with service(tmp_path / "kc.db", clock=clock) as svc:
        r = await svc.start(TASK, budget=3, params={"lease_seconds": 60})
        assert r.next_step is not None
        clock.advance(61)
        st = await svc.status(r.tree.id)
        late = await svc.submit(r.tree.id, r.next_step.node_id, candidate("correct"))
    assert st.counts.lapsed == 1 and st.counts.pending == 1  # the lapsed step, and a new one
    assert st.next_step is not None and st.next_step.node_id != r.next_step.node_id
    assert late.node.status == "evaluated" and late.node.outcome == "correct" and late.budget_left == 2


@pytest.mark.anyio
async def test_a_lapsed_lease_whose_budget_was_handed_on_is_refused(tmp_path):
    clock = Clock()
    async with service(tmp_path / "kc.db", clock=clock) as svc:
        r = await svc.start(TASK, budget=2, params={"lease_seconds": 60})
        assert r.next_step is not None
        clock.advance(61)
        b, _ = await svc.next_step(r.tree.id)
        c, _ = await svc.next_step(r.tree.id)
        d, note = await svc.next_step(r.tree.id)
        with pytest.raises(BudgetError, match="held by 2 other open step"):
            await svc.submit(r.tree.id, r.next_step.node_id, candidate("correct"))
        assert b is not None and c is not None
        await svc.submit(r.tree.id, b.node_id, candidate("correct"))
        await svc.submit(r.tree.id, c.node_id, candidate("wrong"))
        with pytest.raises(BudgetError, match="budget is spent: 2 of 2"):
            await svc.submit(r.tree.id, r.next_step.node_id, candidate("correct"))
    assert d is None and "held by 2 open step" in (note or "")


@pytest.mark.anyio
async def test_status_re_offers_the_step_a_client_already_holds(tmp_path):
    async with service(tmp_path / "kc.db") as svc:
        r = await svc.start(TASK, budget=5, client="alice")
        again = await svc.status(r.tree.id, client="alice")
        twice = await svc.status(r.tree.id, client="alice")
        other = await svc.status(r.tree.id, client="alice", new_step=True)
    assert r.next_step is not None and again.next_step is not None and other.next_step is not None
    assert again.next_step.node_id == r.next_step.node_id == twice.next_step.node_id  # type: ignore[union-attr]
    assert other.next_step.node_id != r.next_step.node_id
    assert other.counts.pending == 2


# -------------------------------------------------------------------------------- warm start


@pytest.mark.anyio
async def test_a_tree_for_the_same_operator_and_shapes_on_the_same_arch_starts_from_the_earlier_best(
    tmp_path,
):
    reformatted = TASK.replace('"""Add two vectors."""', "# the same task, written differently").replace(
        "        return x + y", "        return x + y  # elementwise"
    )
    other_size = TASK.replace("N = 1000", "N = 2000")
    async with service(tmp_path / "kc.db", gpu=True) as svc:
        first = await svc.start(TASK, budget=4)
        step = first.next_step
        for v in ["correct 1.5", "correct 4.0", "wrong"]:
            assert step is not None
            step = (await svc.submit(first.tree.id, step.node_id, candidate(v, "first tree"))).next_step
        best = (await svc.status(first.tree.id)).best
        same = await svc.start(TASK, budget=2)
        moved = await svc.start(reformatted, budget=2)
        arch = await svc.start(TASK, budget=2, target="sm_100")
        size = await svc.start(other_size, budget=2)
        off = await svc.start(TASK, budget=2, params={"warm_start": False})
    assert best is not None and best.speedup == 4.0
    assert same.warm_start is not None and same.warm_start.match == "task_hash"
    assert same.warm_start.node_id == best.id and same.warm_start.tree_id == best.tree_id
    assert same.seed_node is not None and same.seed_node.outcome == "correct" and same.seed_node.seed
    assert moved.warm_start is not None and moved.warm_start.match == "operator_and_shapes"
    assert "Warm start" in moved.message
    assert arch.warm_start is None and size.warm_start is None and off.warm_start is None
    assert same.next_step is not None and same.next_step.parent_id == same.seed_node.id


# ------------------------------------------------------------------------------------ errors


@pytest.mark.anyio
async def test_bad_input_gets_an_error_that_says_what_to_do(tmp_path):
    async with service(tmp_path / "kc.db") as svc:
        a = await svc.start(TASK, budget=1)
        b = await svc.start(TASK, budget=3, params={"warm_start": False})
        assert a.next_step is not None and b.next_step is not None
        with pytest.raises(NotFoundError, match="no search tree 999"):
            await svc.submit(999, a.next_step.node_id, candidate("correct"))
        with pytest.raises(NotFoundError, match="no search tree 999"):
            await svc.status(999)
        with pytest.raises(NotFoundError, match="no node 12345"):
            await svc.submit(a.tree.id, 12345, candidate("correct"))
        with pytest.raises(UsageError, match=f"belongs to tree {b.tree.id}, not tree {a.tree.id}"):
            await svc.submit(a.tree.id, b.next_step.node_id, candidate("correct"))
        with pytest.raises(UsageError, match="is the root"):
            await svc.submit(a.tree.id, a.next_step.parent_id, candidate("correct"))
        with pytest.raises(UsageError, match="candidate is empty"):
            await svc.submit(a.tree.id, a.next_step.node_id, "  \n")
        res = await svc.submit(a.tree.id, a.next_step.node_id, candidate("correct"))
        assert res.next_step is None and "budget is spent: 1 of 1" in (res.next_step_note or "")
        with pytest.raises(UsageError, match="already has a verdict"):
            await svc.submit(a.tree.id, a.next_step.node_id, candidate("correct"))
        st = await svc.status(a.tree.id)
        assert st.tree.status == "done" and st.next_step is None
        with pytest.raises(UsageError, match="unknown target 'sm_75'"):
            await svc.start(TASK, target="sm_75")
        with pytest.raises(UsageError, match="unknown policy"):
            await svc.start(TASK, policy="random")
        with pytest.raises(UsageError, match="budget must be between 1"):
            await svc.start(TASK, budget=0)
        with pytest.raises(TaskError, match="does not define get_inputs"):
            await svc.start("import torch\nclass Model:\n    pass\ndef get_init_inputs():\n    return []\n")
        with pytest.raises(TaskError, match="syntax error"):
            await svc.start("class Model(:\n")


def test_a_tree_starts_on_every_task_verify_accepts_and_refuses_it_with_verifys_words() -> None:
    """Whether a source is a task is the engine intake's decision, for a tree as for a verify:
    `get_inputs` bound by an assignment or an import, or under a module-level `if`, is a task to
    both; a missing one is refused by both in the same words. The key still tells sizes apart."""
    from kernelcraft.engine import check_task
    from kernelcraft.search.task import task_key

    head = "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n"
    bound_otherwise = [
        head + "get_inputs = lambda: [torch.randn(N)]\nN = 8\ndef get_init_inputs():\n    return []\n",
        head + "from helpers import get_inputs\ndef get_init_inputs():\n    return []\n",
        head + "if True:\n    def get_inputs():\n        return []\ndef get_init_inputs():\n    return []\n",
    ]
    for source in bound_otherwise:
        check_task(source, "task.py")
        assert len(task_key(source)) == 64
    assert task_key(bound_otherwise[0]) != task_key(bound_otherwise[0].replace("N = 8", "N = 16"))
    missing = head + "def get_init_inputs():\n    return []\n"
    with pytest.raises(TaskError) as by_verify:
        check_task(missing, "task.py")
    with pytest.raises(TaskError) as by_search:
        task_key(missing)
    assert str(by_search.value) == str(by_verify.value) and "get_inputs" in str(by_search.value)


@pytest.mark.anyio
async def test_a_budget_already_spent_refuses_a_late_submit(tmp_path):
    clock = Clock()
    async with service(tmp_path / "kc.db", clock=clock) as svc:
        r = await svc.start(TASK, budget=1, params={"lease_seconds": 10})
        assert r.next_step is not None
        clock.advance(11)
        other, _ = await svc.next_step(r.tree.id)
        assert other is not None
        await svc.submit(r.tree.id, other.node_id, candidate("correct"))
        with pytest.raises(BudgetError, match="budget is spent: 1 of 1 candidates evaluated"):
            await svc.submit(r.tree.id, r.next_step.node_id, candidate("correct"))


# -------------------------------------------------------------------------------------- resume

WORKER = textwrap.dedent(
    """
    import asyncio, sys
    from search_scripted import ScriptedEvaluator, TASK, candidate
    from kernelcraft.knowledge.rulebook import Rulebook
    from kernelcraft.search.service import SearchService
    from kernelcraft.store import Store

    VERDICTS = ["correct 1.2", "wrong", "correct 2.0", "compile", "correct 0.8", "correct 2.5", "wrong"]

    async def main(db):
        store = await Store.open(db)
        svc = SearchService(store, ScriptedEvaluator(has_gpu=True), Rulebook(store))
        r = await svc.start(TASK, seed_candidate=candidate("correct 1.0"), budget=1000, client="worker")
        print("tree", r.tree.id, flush=True)
        step = r.next_step
        i = 0
        while step is not None:
            res = await svc.submit(r.tree.id, step.node_id, candidate(VERDICTS[i % 7], str(i)), client="worker")
            i += 1
            print("recorded", res.node.id, "best", res.best.id, res.best.reward, flush=True)
            step = res.next_step

    asyncio.run(main(sys.argv[1]))
    """
)


def _read_lines(proc: subprocess.Popen[str], until: int, timeout: float) -> list[str]:
    """Lines from the child's stdout until `until` 'recorded' lines, or fail after `timeout` s."""
    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while sum(line.startswith("recorded") for line in lines) < until:
        left = deadline - time.monotonic()
        if left <= 0 or not sel.select(left):
            raise AssertionError(f"the worker did not record {until} nodes in {timeout} s: {lines}")
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(
                f"the worker exited early: {lines}; stderr: {proc.stderr.read() if proc.stderr else ''}"
            )
        lines.append(line.strip())
    return lines


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_tree_killed_mid_search_resumes_with_the_same_best_node(tmp_path):
    db = tmp_path / "kc.db"
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests")])}
    proc = subprocess.Popen(
        [sys.executable, str(script), str(db)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        lines = _read_lines(proc, until=12, timeout=60)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    tree_id = int(lines[0].split()[1])
    recorded = [line.split() for line in lines if line.startswith("recorded")]
    last_best_id, last_best_reward = int(recorded[-1][3]), float(recorded[-1][4])

    # A fresh process reads the state the killed one left.
    out = subprocess.run(
        [sys.executable, "-m", "kernelcraft", "tree", "status", str(tree_id), "--db", str(db), "--json"]
        + ["--client", "worker"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    fresh = TreeStatus.model_validate_json(out.stdout)
    assert fresh.best is not None and fresh.best.reward is not None
    assert fresh.best.reward >= last_best_reward
    if fresh.best.reward == last_best_reward:
        assert fresh.best.id == last_best_id
    assert fresh.budget_used >= len(recorded)
    assert fresh.best.code is not None and fresh.best.verdict is not None
    async with service(db, gpu=True) as svc:
        st = await svc.status(tree_id, client="worker")
        assert st.best is not None and st.best.id == fresh.best.id  # type: ignore[union-attr]
        assert st.next_step is not None
        res = await svc.submit(tree_id, st.next_step.node_id, candidate("correct 9.0"), client="worker")
    # The worker's open step (if the kill left one) is offered back rather than a new one.
    assert st.next_step is not None
    if fresh.next_step is not None:
        assert st.next_step.node_id == fresh.next_step.node_id
    assert res.new_best and res.budget_left == 1000 - st.budget_used - 1
    assert json.loads(out.stdout)["tree"]["id"] == tree_id
