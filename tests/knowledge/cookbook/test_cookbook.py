"""The cookbook (kernelcraft/knowledge/cookbook/): every entry's kernel passes the real evaluator on
its task, in Triton's interpreter and compiled for sm_90a; entries are found by op, by KernelBench
problem and by a task's source; the MCP tool, the CLI and the agent's seed hook return them."""

from __future__ import annotations

import ast
import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from server_support import NoEvaluations, settings_for

from kernelcraft.agent.loop.cookbook_seed import compatible, cookbook_seed
from kernelcraft.agent.loop.session import ToolSession
from kernelcraft.base.errors import UsageError
from kernelcraft.knowledge.cookbook import load_cookbook
from kernelcraft.knowledge.cookbook.book import ENTRIES, with_figures
from kernelcraft.schema.cookbook import FAMILIES, CookbookFigure
from kernelcraft.server.app import create_server

BOOK = load_cookbook()
IDS = [e.id for e in BOOK.entries]


@pytest.mark.slow
def test_every_cookbook_kernel_passes_its_task_in_the_evaluator(evaluator, job_for) -> None:
    """Every entry is submitted at once: the evaluator runs one entry's trials while the GPU check
    compiles another's kernels for sm_90a (the suite's session evaluator; 6 entries took 20-24 s
    at once against 37-52 s one by one on the 2-core helper machine)."""
    jobs = {
        i: job_for(ENTRIES / i / "task.py", ENTRIES / i / "kernel.py", trials=1, gpu_check="sm_90a")
        for i in IDS
    }

    async def every_entry() -> list[Any]:
        return await asyncio.gather(*(evaluator.evaluator.submit(job) for job in jobs.values()))

    verdicts = dict(zip(jobs, (r.verify for r in evaluator.call(every_entry(), timeout=1800)), strict=True))
    failed = {
        i: (v.status, v.evidence, v.notes) if v is not None else None
        for i, v in verdicts.items()
        if v is None or not v.correct or not v.trials_passed == v.trials_total == v.input_sets
    }
    assert not failed, failed


@pytest.mark.slow
def test_a_cookbook_kernel_with_a_wrong_result_fails_in_the_evaluator(evaluator, job_for) -> None:
    # the test above can fail: the same kernel with each sum 0.1% off is refused
    folder = ENTRIES / "reduce_dim"
    wrong = (folder / "kernel.py").read_text().replace("acc += x\n", "acc += x * 1.001\n")
    assert wrong != (folder / "kernel.py").read_text()
    v = evaluator.submit(job_for(folder / "task.py", wrong, trials=1)).verify
    assert v is not None and not v.correct and v.status == "numerical_mismatch", v


def test_every_entry_has_its_files_a_family_and_figures_only_from_a_kernelbench_run() -> None:
    assert len(IDS) == len(set(IDS)) >= 20
    assert {e.family for e in BOOK.entries} == set(FAMILIES)  # every family KernelBench is made of
    for e in BOOK.entries:
        kernel = ast.parse((ENTRIES / e.id / "kernel.py").read_text())
        assert any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in kernel.body), e.id
        assert e.task and e.conditions and e.precision and e.kernelbench, e.id
        for f in e.figures:  # written by bench/bench_cookbook.py --write-figures, never by hand
            assert f.kernelbench in e.kernelbench and f.device and f.ms > 0 and f.measured, (e.id, f)


@pytest.mark.parametrize("entry_id", IDS)
def test_an_entrys_own_task_source_finds_that_entry_first(entry_id: str) -> None:
    best = BOOK.best_for_task((ENTRIES / entry_id / "task.py").read_text())
    assert best is not None and best.id == entry_id
    assert "class ModelNew" in best.kernel_code and "class Model" in best.task_code


def test_every_kernelbench_problem_the_index_names_finds_its_entry_first() -> None:
    named = {k.split("/", 1)[1]: e.id for e in BOOK.entries for k in e.kernelbench}
    assert len(named) >= 60
    missed = {name: [x.id for x in BOOK.search(name, with_code=False)] for name in named}
    assert {n: ids for n, ids in missed.items() if not ids or ids[0] != named[n]} == {}


@pytest.mark.parametrize(
    ("query", "family", "expected"),
    [
        ("flash attention", None, "attention"),
        ("cumprod", None, "scan"),
        ("42_Max_Pooling_2D", None, "pool2d"),
        ("tall skinny matmul", None, "gemm_small_k"),
        ("hinge loss", None, "elementwise_loss"),
        ("gelu", "gemm_epilogue", "linear_epilogue"),
        ("normalization", "norm", None),
    ],
)
def test_search_finds_an_entry_by_op_problem_or_words(
    query: str, family: str | None, expected: str | None
) -> None:
    found = BOOK.search(query, family=family, with_code=False)
    assert found and all(x.family == family for x in found if family)
    assert expected is None or found[0].id == expected
    assert all(x.kernel_code == "" for x in found)


def test_search_refuses_an_unknown_family_and_finds_nothing_for_nothing() -> None:
    with pytest.raises(UsageError, match="the families are: gemm"):
        BOOK.search("matmul", family="gemms")
    assert BOOK.search("zzqx") == [] and BOOK.search("((( :: )))") == []


def test_measured_figures_are_written_into_the_index_and_shown_as_lines(tmp_path: Path) -> None:
    index = tmp_path / "index.json"
    data = json.loads((ENTRIES.parent / "index.json").read_text())
    for e in data["entries"]:  # as before any run: no figures
        e["figures"] = []
    index.write_text(json.dumps(data))
    fig = CookbookFigure(
        kernelbench="level1/1_Square_matrix_multiplication_", device="NVIDIA H200", ms=1.5, eager_ms=3.0,
        compiled_ms=2.7, x_eager=2.0, x_compiled=1.8, measured="2026-12-05 abc1234",
    )  # fmt: skip
    assert with_figures(index, {"gemm": [fig]}) == 1
    entries = {e["id"]: e for e in json.loads(index.read_text())["entries"]}
    assert entries["gemm"]["figures"] == [fig.model_dump()] and entries["bmm"]["figures"] == []
    (tmp_path / "entries").symlink_to(ENTRIES)
    book = load_cookbook(tmp_path)
    assert book.example("gemm").figures == [
        "level1/1_Square_matrix_multiplication_: 1.5 ms, x2.00 eager, x1.80 torch.compile (NVIDIA H200, 2026-12-05 abc1234)"
    ]


# ------------------------------------------------------------------------- MCP tool and agent hook


async def _client(tmp_path: Path) -> Any:
    return Client(create_server(settings_for(tmp_path), NoEvaluations))


@pytest.mark.anyio
async def test_search_examples_returns_the_kernel_for_a_pasted_kernelbench_task(tmp_path: Path) -> None:
    task = (ENTRIES / "softmax" / "task.py").read_text()
    async with await _client(tmp_path) as client:
        result = await client.call_tool("search_examples", {"query": task, "limit": 1, "include_code": True})
        assert not result.is_error
        (top,) = result.structured_content["examples"]
        assert top["id"] == "softmax" and "class ModelNew" in top["kernel_code"] and top["conditions"]
        bad = await client.call_tool("search_examples", {"query": "matmul", "family": "matmuls"})
        assert bad.is_error and "the families are" in bad.content[0].text


@pytest.mark.anyio
async def test_the_agents_seed_hook_picks_the_cookbook_kernel_for_a_task(tmp_path: Path) -> None:
    task = (ENTRIES / "layernorm" / "task.py").read_text()
    async with await _client(tmp_path) as client:
        example = await cookbook_seed(ToolSession(client, "a test server"), task)
        assert example is not None and example.id == "layernorm" and compatible(example, task)
        other = (ENTRIES / "gemm" / "task.py").read_text()
        assert not compatible(example, other)
        assert await cookbook_seed(ToolSession(client, "a test server"), "zzqx") is None


# ----------------------------------------------------------------------------------------- CLI


def kc(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kernelcraft", *args], input=stdin, capture_output=True, text=True, timeout=120
    )


def test_cookbook_list_json_gives_id_family_task_and_figures() -> None:
    r = kc("cookbook", "list", "--json")
    assert r.returncode == 0, r.stderr
    listed = json.loads(r.stdout)
    assert [x["id"] for x in listed] == IDS
    assert all(set(x) >= {"id", "family", "task", "figures"} for x in listed)


def test_cookbook_search_reads_a_task_from_stdin_and_show_prints_the_code() -> None:
    task = (ENTRIES / "cross_entropy" / "task.py").read_text()
    r = kc("cookbook", "search", "-", "--limit", "1", stdin=task)
    assert r.returncode == 0 and r.stdout.startswith("[cross_entropy]"), r.stdout + r.stderr
    shown = kc("cookbook", "show", "cross_entropy")
    assert shown.returncode == 0 and shown.stdout == (ENTRIES / "cross_entropy" / "kernel.py").read_text()
    missing = kc("cookbook", "show", "no_such_entry")
    assert missing.returncode == 2 and "the entries are: gemm" in missing.stderr
