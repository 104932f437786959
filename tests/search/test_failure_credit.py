"""An error is credited to the seed rule about its mistake: `query_rules` with the error text as
context gives that rule first.

Every seed rule names, in `verified_by`, the captured error that shows its claim
(`capture:NAME`, tests/fixtures/errors/triton-<version>/NAME.txt). Each of those texts must bring
that rule first — as an exception alone (what the compile stage stores) and as the engine's whole
traceback (tests/fixtures/errors/tracebacks/, what a failure inside forward stores), where torch's
and the harness's frames once outvoted the candidate's words (a `tl.tanh` failure came back with
the rule about `torch.exp`).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from search_scripted import TASK

from kernelcraft.base.failures import FailureClass, classify
from kernelcraft.engine.host.evaluator import ProgressCallback
from kernelcraft.knowledge.rulebook import Rulebook
from kernelcraft.schema.evaluation import EvalJob, EvalResult, Evidence, VerifyResult
from kernelcraft.search.service import SearchService
from kernelcraft.store import Store

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "errors"
SEEDS = REPO / "kernelcraft" / "knowledge" / "seed_rules.jsonl"


def seed_rule_by_capture() -> dict[str, str]:
    """capture name -> the text of the seed rule it verifies."""
    out: dict[str, str] = {}
    for line in SEEDS.read_text(encoding="utf-8").splitlines():
        rule = json.loads(line)
        for source in rule.get("verified_by", "").split(";"):
            kind, _, name = source.strip().partition(":")
            if kind == "capture":
                out.setdefault(name.split()[0], rule["text"])
    return out


RULES = seed_rule_by_capture()


def exception_cases() -> list[tuple[str, str, str]]:
    """(path, class, capture) for each captured exception some seed rule is verified by."""
    cases = []
    for index in sorted(FIXTURES.glob("triton-*/index.tsv")):
        for row in index.read_text(encoding="utf-8").splitlines()[1:]:
            name, _stage, expected, result = row.split("\t")
            if result == "error" and name in RULES:
                cases.append((f"{index.parent.name}/{name}.txt", expected, name))
    return cases


def traceback_cases() -> list[tuple[str, str, str]]:
    rows = (FIXTURES / "tracebacks" / "index.tsv").read_text(encoding="utf-8").splitlines()[1:]
    return [(f"tracebacks/{r.split()[0]}.txt", r.split()[1], r.split()[2]) for r in rows]


CASES = exception_cases() + traceback_cases()


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def seeded() -> AsyncIterator[Rulebook]:
    store = await Store.open(":memory:")
    try:
        rulebook = Rulebook(store)
        await rulebook.import_seed()
        yield rulebook
    finally:
        await store.aclose()


def test_every_seed_rule_verified_by_a_capture_is_tested_here() -> None:
    tested = {capture for _, _, capture in CASES}
    with_text = {name for name in RULES if any(FIXTURES.glob(f"triton-*/{name}.txt"))}
    assert with_text <= tested and len(tested) >= 35
    assert {capture for _, _, capture in traceback_cases()} >= {"tl_tanh_missing", "torch_call_in_kernel"}


@pytest.mark.parametrize(("path", "cls", "capture"), CASES, ids=[c[0] for c in CASES])
@pytest.mark.anyio
async def test_a_captured_error_brings_the_seed_rule_it_verifies_first(
    seeded: Rulebook, path: str, cls: str, capture: str
) -> None:
    text = (FIXTURES / path).read_text(encoding="utf-8")
    if path.startswith("tracebacks/"):
        # The class the engine gives a whole traceback: classify reads only the exceptions.
        assert classify(text) is FailureClass(cls)
    top = await seeded.query_rules(text, arch="sm_90a", limit=1)
    assert [rule.text for rule in top] == [RULES[capture]]


@pytest.mark.anyio
async def test_a_task_or_a_kernel_as_context_is_ranked_by_its_words_alone(seeded: Rulebook) -> None:
    # Not an error: no class, no pointed names; the words decide, as before.
    kernel = "y = tl.float32(x) * 2"
    top = await seeded.query_rules(kernel, arch="sm_90a", limit=1)
    assert "as a function to cast" in top[0].text


class TracebackEvaluator:
    """Answers every job as the engine answered the tl.tanh candidate on the CPU."""

    has_gpu = False

    async def submit(self, job: EvalJob, progress: ProgressCallback | None = None) -> EvalResult:
        text = (FIXTURES / "tracebacks" / "interp_tl_tanh.txt").read_text(encoding="utf-8")
        evidence = Evidence(message="forward raised InterpreterError", error_text=text)
        verdict = VerifyResult(
            correct=False,
            status="compile_unknown_api",
            failure_class=FailureClass.COMPILE_UNKNOWN_API,
            evidence=evidence,
            trials=1,
            device="cpu (Triton interpreter)",
            interpreter=True,
        )
        return EvalResult(verify=verdict)

    async def aclose(self) -> None:
        return None


@pytest.mark.anyio
async def test_a_submitted_tl_tanh_failure_is_summarised_by_its_line_and_brings_the_tl_tanh_rule(
    tmp_path: Path,
) -> None:
    store = await Store.open(tmp_path / "kc.db")
    try:
        rulebook = Rulebook(store)
        await rulebook.import_seed()
        search = SearchService(store, TracebackEvaluator(), rulebook)
        started = await search.start(TASK, budget=2)
        assert started.next_step is not None
        with anyio.fail_after(30):
            result = await search.submit(started.tree.id, started.next_step.node_id, "class ModelNew: ...")
        assert result.node.error is not None
        top = await rulebook.query_rules(result.node.error, arch="sm_90a", limit=1)
    finally:
        await store.aclose()
    assert "did not compile (compile unknown api): line 14, in scaled_add_kernel: tl.store(" in result.message
    assert "— AttributeError: module 'triton.language' has no attribute 'tanh'" in result.message
    assert "Traceback (most recent call last):;" not in result.message
    assert "torch/nn/modules" not in result.node.error and "scaled_add_kernel" in result.node.error
    assert [rule.text for rule in top] == [RULES["tl_tanh_missing"]]
