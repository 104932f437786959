"""An assistant's 50-step session fits its context (issue 38): the sizes `bench/bench_session.py`
measures, held. Sizes are deterministic, so the scripted evaluator stands in for the real one
(the bench runs the real one and docs/benchmarks.md records it)."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from bench.bench_session import STEP_BUDGET, TOOLS_LIST_BUDGET, _scripted, kernels, session

STEPS = 10


@pytest.fixture(scope="module")
def rows() -> list[dict[str, Any]]:
    return anyio.run(session, _scripted, kernels(lambda v: f"# verdict: {v}\n"), STEPS)


def test_the_tool_list_fits_in_24_kb(rows: list[dict[str, Any]]) -> None:
    assert rows[0]["answer"] == "tools/list"
    assert rows[0]["wire_bytes"] <= TOOLS_LIST_BUDGET


def test_every_step_answer_fits_in_8_kb_with_a_7_kb_kernel(rows: list[dict[str, Any]]) -> None:
    assert len(kernels()["seed"]) > 6_000
    answers = rows[1:]
    assert len(answers) == STEPS + 2 and not any(r["error"] for r in answers)
    over = [(r["answer"], r["wire_bytes"]) for r in answers if r["wire_bytes"] > STEP_BUDGET]
    assert over == []


def test_a_step_answer_does_not_grow_with_the_chain(rows: list[dict[str, Any]]) -> None:
    submits = [r["wire_bytes"] for r in rows if r["answer"].startswith("submit")]
    assert max(submits[-4:]) <= max(submits[:4])


def test_no_answer_echoes_a_kernel_or_the_task_the_client_sent(rows: list[dict[str, Any]]) -> None:
    for r in rows[1:]:
        data = json.loads(r["structured"])
        assert "def softmax_online_kernel" not in json.dumps(data), r["answer"]
        assert "def get_inputs" not in json.dumps(data), r["answer"]


def test_a_submit_names_the_best_node_by_id_and_sends_it_once(rows: list[dict[str, Any]]) -> None:
    submits = [json.loads(r["structured"])["submit"] for r in rows if r["answer"].startswith("submit")]
    assert all(s["best_id"] == 2 for s in submits)  # the seed stays best (scripted: no timing)
    assert sum(1 for s in submits if s["best"] is not None) == 1
