"""Run reports: the data built from a run directory and from the tree's models, the page it renders,
the `kernelcraft report` command and the `trees://{tree_id}/report` resource.

tests/fixtures/report_run is the run directory of `kernelcraft optimize examples/layernorm/task.py
--llm none --steps 3 --out DIR` on the CPU (absolute paths shortened; report.html left out): a seed
and three tuner steps, all correct, no speed measured. The browser checks are in
test_report_browser.py.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from html import escape
from pathlib import Path

import pytest
from mcp import Client
from search_scripted import TASK, ScriptedEvaluator, candidate
from server_support import NoEvaluations, settings_for

from kernelcraft.agent.llm.config import LLMConfig
from kernelcraft.agent.llm.core import Usage
from kernelcraft.agent.loop.explore import optimize
from kernelcraft.agent.loop.options import OptimizeOptions
from kernelcraft.agent.loop.rundir import RunDir
from kernelcraft.agent.loop.runreport import write_run_report
from kernelcraft.agent.loop.session import ToolSession
from kernelcraft.base.errors import UsageError
from kernelcraft.base.failures import FailureClass
from kernelcraft.cli import main
from kernelcraft.engine.host.evaluator import ProgressCallback
from kernelcraft.report.build import from_run_dir, from_tree, telling_line, with_run
from kernelcraft.report.figures import evaluated_in_order, running_best, tree_layout
from kernelcraft.report.html import facts, render_html
from kernelcraft.report.model import ReportNode, RunReport, TokenUsage
from kernelcraft.schema.evaluation import EvalJob, EvalResult, ProfileResult, Timing, VerifyResult
from kernelcraft.schema.tree import NodeInfo, TreeInfo, TreeView
from kernelcraft.server.app import create_server

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "report_run"
NOW = "2026-01-01T00:00:00Z"


def node(id: int, parent: int | None, kind: str = "small", **kw: object) -> NodeInfo:
    fields: dict[str, object] = {"status": "evaluated", "client": "local", "created_at": NOW}
    fields.update(kw)
    return NodeInfo(id=id, tree_id=1, parent_id=parent, kind=kind, **fields)  # type: ignore[arg-type]


def timed(eager: float, compiled: float) -> EvalResult:
    verify = VerifyResult(correct=True, status="passed", trials=5, device="cuda:0", interpreter=False)
    timing = Timing(median_us=100 / eager, iqr_us=1.0, min_us=90 / eager, reps=100, method="cuda_events")
    profile = ProfileResult(
        available=True, candidate=timing, speedup_vs_eager=eager, speedup_vs_compiled=compiled
    )
    return EvalResult(verify=verify, profile=profile)


def gpu_view() -> TreeView:
    """A tree timed on a GPU: the seed (1.0×), a better small step (2.0×), a wrong large step with a
    traceback, an abandoned small step, a failure of the seed's kind, and a step still pending."""
    tree = TreeInfo(
        id=1,
        task_name="vector_add",
        task_hash="0" * 64,
        target="sm_90a",
        policy="adaexplore",
        params={"baseline": "eager"},
        budget=6,
        seed=0,
        status="running",
        steps_issued=5,
        created_by="local",
        created_at=NOW,
    )
    traceback = 'Traceback (most recent call last):\n  File "x.py", line 3\nValueError: <b>bad</b> block'
    nodes = [
        node(1, None, "root"),
        node(2, 1, "large", seed=True, outcome="correct", speedup=1.0, verdict=timed(1.0, 0.8)),
        node(3, 2, "small", step_index=1, outcome="correct", speedup=2.0, verdict=timed(2.0, 1.6)),
        node(
            4,
            1,
            "large",
            step_index=2,
            outcome="wrong",
            failure_class=FailureClass.NUMERICAL_MISMATCH,
            error=traceback,
            reward=0.05,
        ),
        node(
            5, 3, "small", step_index=3, abandoned=True, outcome="not_compiled", error="edits did not apply"
        ),
        node(6, 3, "small", step_index=4, outcome="wrong", failure_class=FailureClass.NUMERICAL_MISMATCH),
        node(7, 6, "small", step_index=5, status="pending"),
    ]
    return TreeView(tree=tree, best_node_id=3, nodes=nodes)


SEED = "def kernel():\n    BLOCK = 256\n    return BLOCK\n"
BEST = "def kernel():\n    BLOCK = 1024\n    return BLOCK\n"


def gpu_report() -> RunReport:
    steps = [
        {
            "node_id": 3,
            "proposer": "llm",
            "usage": {
                "calls": 2,
                "input_tokens": 1000,
                "output_tokens": 300,
                "total_tokens": 1300,
                "cost_usd": 0.0075,
            },
        },
        {
            "node_id": 4,
            "proposer": "llm",
            "usage": {
                "calls": 1,
                "input_tokens": 800,
                "output_tokens": 900,
                "total_tokens": 1700,
                "cost_usd": 0.0159,
            },
        },
        {"node_id": 5, "mode": "tuner", "usage": {"calls": 0, "total_tokens": 0, "cost_usd": 0.0}},
    ]
    summary = {
        "llm": "anthropic",
        "model": "claude-sonnet-5-5",
        "stopped_because": "the tree's budget is spent",
        "usage": {
            "calls": 3,
            "input_tokens": 1800,
            "output_tokens": 1200,
            "total_tokens": 3000,
            "cost_usd": 0.0234,
        },
    }
    return with_run(from_tree(gpu_view(), seed_code=SEED, best_code=BEST), steps, summary)


# ---------------------------------------------------------------------------- building the data


def test_a_cpu_run_directory_gives_every_node_of_the_tree_with_its_proposer_and_no_speed() -> None:
    report = from_run_dir(FIXTURE)
    steps = [json.loads(line) for line in (FIXTURE / "steps.jsonl").read_text().splitlines()]
    summary = json.loads((FIXTURE / "summary.json").read_text())
    assert report.tree_id == summary["tree_id"] and report.task_name == "layernorm"
    assert [n.kind for n in report.nodes][:2] == ["root", "large"] and report.nodes[1].seed
    assert len(report.nodes) == 2 + len(steps)  # the root, the seed, one node per step
    for step in steps:
        n = report.node(step["node_id"])
        assert n is not None and n.parent_id == step["parent_id"] and n.kind == step["kind"]
        assert n.proposer == "tuner" and n.usage is not None and n.usage.total_tokens == 0
    assert report.speedup_measured is False and all(n.speedup is None for n in report.nodes)
    assert report.speed_note == summary["gpu_note"]  # the run's own words about the missing GPU
    assert report.best_node_id == summary["best"]["node_id"] and report.failures_by_class == {}
    assert report.seed_code is not None and "class ModelNew" in report.seed_code
    assert report.usage is not None and report.usage.total_tokens == 0 and report.llm == "none"
    assert report.stopped_because == summary["stopped_because"]


def test_the_pages_step_count_is_the_summarys_and_the_seed_is_said_apart() -> None:
    report = from_run_dir(FIXTURE)
    summary = json.loads((FIXTURE / "summary.json").read_text())
    assert (summary["steps_done"], report.budget, len(report.nodes)) == (3, 3, 5)  # root, seed, 3 steps
    page = facts(report)
    assert (
        "<td>steps</td><td>3 of the budget&#x27;s 3 evaluated: 3 correct, 0 wrong, 0 not compiled, 0 abandoned"
        in page
    )
    assert "<td>seed</td><td>node 2, correct (evaluated at the start, outside the budget)" in page
    assert "4 evaluated" not in page


def test_a_run_directory_without_tree_json_says_how_to_get_one(tmp_path: Path) -> None:
    for name in ("steps.jsonl", "summary.json", "best_kernel.py"):
        shutil.copy(FIXTURE / name, tmp_path / name)
    with pytest.raises(UsageError, match=r"no tree\.json.*Rerun `kernelcraft optimize TASK --out"):
        from_run_dir(tmp_path)
    with pytest.raises(UsageError, match="not a directory"):
        from_run_dir(tmp_path / "missing")


def test_a_last_step_line_cut_short_by_a_kill_is_left_out(tmp_path: Path) -> None:
    shutil.copytree(FIXTURE, tmp_path / "run")
    with (tmp_path / "run" / "steps.jsonl").open("a") as f:
        f.write('{"node_id": 99, "proposer": "ll')
    assert len(from_run_dir(tmp_path / "run").nodes) == len(from_run_dir(FIXTURE).nodes)


def test_the_trees_report_takes_speedups_against_eager_and_compile_from_the_verdicts() -> None:
    report = from_tree(gpu_view(), seed_code=SEED, best_code=BEST)
    by_id = {n.id: n for n in report.nodes}
    assert report.speedup_measured is True and report.speed_note is None
    assert (by_id[3].speedup_vs_eager, by_id[3].speedup_vs_compiled) == (2.0, 1.6)
    assert by_id[3].candidate_us is None  # as the tree gave it: the view's own field
    assert [by_id[i].verdict for i in range(1, 8)] == [
        "root",
        "correct",
        "correct",
        "wrong",
        "abandoned",
        "wrong",
        "pending",
    ]
    assert report.failures_by_class == {"numerical_mismatch": 2, "abandoned": 1}
    assert by_id[4].error == "ValueError: <b>bad</b> block"  # a traceback's last line
    assert report.usage is None and all(n.proposer is None for n in report.nodes)  # not in the tree


def test_the_run_adds_proposers_tokens_and_totals_to_the_trees_report() -> None:
    report = gpu_report()
    by_id = {n.id: n for n in report.nodes}
    assert by_id[3].proposer == "llm" and by_id[3].usage is not None and by_id[3].usage.total_tokens == 1300
    assert by_id[5].proposer == "tuner"  # runs before `proposer` was recorded named it `mode`
    assert by_id[2].proposer is None and by_id[2].usage is None  # the seed is no step
    assert (
        report.usage is not None and report.usage.cost_usd == 0.0234 and report.model == "claude-sonnet-5-5"
    )


def test_the_report_reads_every_field_of_usage_the_driver_writes() -> None:
    """The driver counts tokens in a dataclass (`Usage`) and the report reads them back from
    steps.jsonl into a model of its own (`TokenUsage`), keeping the fields it knows: a field
    added to one and not the other would be dropped without a word."""
    written = Usage(input_tokens=7, output_tokens=5, thinking_tokens=2, calls=1, cost_usd=0.25).to_dict()
    assert set(written) == set(TokenUsage.model_fields)
    assert TokenUsage.model_validate(written).model_dump() == written


def test_a_cpu_tree_says_no_gpu_and_an_untimed_gpu_tree_says_nothing_was_timed() -> None:
    cpu = VerifyResult(correct=True, status="passed", trials=5, device="cpu", interpreter=True)
    view = gpu_view()
    cpu_nodes = [
        n.model_copy(update={"speedup": None, "verdict": EvalResult(verify=cpu)}) for n in view.nodes
    ]
    cpu_report = from_tree(view.model_copy(update={"nodes": cpu_nodes}), seed_code=None, best_code=None)
    assert cpu_report.speedup_measured is False and "No GPU" in (cpu_report.speed_note or "")
    plain = [n.model_copy(update={"speedup": None, "verdict": None}) for n in view.nodes]
    untimed = from_tree(view.model_copy(update={"nodes": plain}), seed_code=None, best_code=None)
    assert untimed.speedup_measured is False and "was timed" in (untimed.speed_note or "")


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("Traceback (most recent call last):\n  File 'k.py'\n\nKeyError: 'BLOCK'\n", "KeyError: 'BLOCK'"),
        ("output 0 differs at [3]\nmax abs error 1.0", "output 0 differs at [3]"),
        ("   \n", None),
        (None, None),
    ],
)
def test_an_error_is_shown_by_its_telling_line(text: str | None, line: str | None) -> None:
    assert telling_line(text) == line


def test_a_long_error_line_is_trimmed() -> None:
    line = telling_line("x" * 1000)
    assert line is not None and len(line) == 300 and line.endswith("…")


# ---------------------------------------------------------------------------- drawing


def test_the_tree_layout_puts_each_child_right_of_its_parent_and_each_leaf_on_its_own_row() -> None:
    nodes = from_tree(gpu_view(), seed_code=None, best_code=None).nodes
    pos = tree_layout(nodes)
    assert set(pos) == {n.id for n in nodes}
    for n in nodes:
        if n.parent_id is not None:
            assert pos[n.id][0] == pos[n.parent_id][0] + 1
    parents = {n.parent_id for n in nodes}
    leaves = [pos[n.id][1] for n in nodes if n.id not in parents]
    assert len(set(leaves)) == len(leaves)
    assert pos[3][1] == (pos[5][1] + pos[6][1]) / 2  # a parent sits between its children


def test_a_chain_of_thousands_of_refinements_is_laid_out_without_recursion() -> None:
    chain = [ReportNode(id=1, parent_id=None, kind="root", verdict="root")] + [
        ReportNode(id=i, parent_id=i - 1, kind="small", verdict="correct") for i in range(2, 5002)
    ]
    pos = tree_layout(chain)
    assert pos[5001] == (5000.0, -0.0)


def test_the_best_speedup_so_far_never_drops_and_skips_unmeasured_steps() -> None:
    assert running_best([None, 1.0, None, 0.5, 2.0, 1.5]) == [None, 1.0, 1.0, 1.0, 2.0, 2.0]
    order = evaluated_in_order(from_tree(gpu_view(), seed_code=None, best_code=None))
    assert [n.id for n in order] == [2, 3, 4, 5, 6]  # the seed first, no root, no pending step


def plot_divs(page: str) -> list[str]:
    return re.findall(r'<div id="([a-z]+)" class="plotly-graph-div"', page)


def test_a_page_without_measured_speed_says_so_and_draws_no_speedup_curve() -> None:
    page = render_html(from_run_dir(FIXTURE))
    assert plot_divs(page) == ["tree"]
    assert 'id="speed-not-measured"' in page and "No GPU here" in page
    assert "The best kernel is the seed itself" in page and "no tokens were spent" in page
    assert page.count("<script") == 2  # plotly.js inlined once, one figure: nothing loaded from outside
    assert not re.search(r"<script[^>]+src=", page)


def test_a_measured_page_draws_every_plot_and_the_diff_and_escapes_what_candidates_wrote() -> None:
    page = render_html(gpu_report())
    assert plot_divs(page) == ["tree", "speedup", "failures", "tokens"]
    assert 'id="speed-not-measured"' not in page
    assert '<table class="diff"' in page and '=&nbsp;2<span class="diff_chg">56</span>' in page
    assert "<b>bad</b>" not in page and "ValueError: &lt;b&gt;bad" in page  # escaped in the hover text
    assert "3,000 tokens in 3 LLM calls, $0.0234" in page
    assert "node 3: 2.00× vs PyTorch eager (1.60× vs torch.compile" in page


# ---------------------------------------------------------------------------- the command


def test_kernelcraft_report_writes_the_page_and_prints_where(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r.html"
    with pytest.raises(SystemExit) as done:
        main(["report", str(FIXTURE), "--out", str(out)])
    assert done.value.code == 0
    assert f"{out} (open it in a browser)" in capsys.readouterr().out
    assert out.read_text().startswith("<!DOCTYPE html>")
    with pytest.raises(SystemExit):
        main(["report", str(FIXTURE), "--out", str(out), "--json"])
    assert RunReport.model_validate_json(capsys.readouterr().out).tree_id == 1


def test_kernelcraft_report_on_a_directory_without_a_run_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as done:
        main(["report", str(tmp_path)])
    assert done.value.code == 2 and "no tree.json" in capsys.readouterr().err


# ---------------------------------------------------------------------------- the resource


class TimedEvaluator(ScriptedEvaluator):
    """The scripted GPU evaluator, with torch.compile at 1.25× eager's speed."""

    def __init__(self, settings: object = None) -> None:
        super().__init__(has_gpu=True)

    async def submit(self, job: EvalJob, progress: ProgressCallback | None = None) -> EvalResult:
        result = await super().submit(job, progress)
        p = result.profile
        if p is not None and p.speedup_vs_eager is not None:
            p.speedup_vs_compiled = p.speedup_vs_eager / 1.25
        return result


@pytest.mark.anyio
async def test_the_report_resource_builds_the_report_of_a_tree_from_the_database(tmp_path: Path) -> None:
    seed, better = candidate("correct 1.0", "seed"), candidate("correct 2.5", "better")
    async with Client(create_server(settings_for(tmp_path), TimedEvaluator)) as client:
        started = await client.call_tool(
            "search_tree_step",
            {"action": "start", "reference_code": TASK, "candidate_code": seed, "budget": 3, "seed": 1},
        )
        assert started.structured_content is not None
        step = started.structured_content["start"]["next_step"]
        tree_id = step["tree_id"]
        for code in (better, candidate("wrong")):
            submitted = await client.call_tool(
                "search_tree_step",
                {"action": "submit", "tree_id": tree_id, "node_id": step["node_id"], "candidate_code": code},
            )
            assert submitted.structured_content is not None
            step = submitted.structured_content["submit"]["next_step"]
        read = await client.read_resource(f"trees://{tree_id}/report")
        report = RunReport.model_validate_json(read.contents[0].text)  # type: ignore[union-attr]
        assert report.speedup_measured is True and report.usage is None
        best = report.node(report.best_node_id)
        assert best is not None and (best.speedup_vs_eager, best.speedup_vs_compiled) == (2.5, 2.0)
        assert report.seed_code == seed and report.best_code == better
        assert report.failures_by_class == {"numerical_mismatch": 1}
        document = json.loads((await client.read_resource(f"trees://{tree_id}")).contents[0].text)  # type: ignore[union-attr]
        assert document["view"]["tree"]["id"] == tree_id  # the tree's own resource is still itself
        for bad, words in (("x1", "not a number"), ("4242", "no search tree 4242")):
            with pytest.raises(Exception, match=words):
                await client.read_resource(f"trees://{bad}/report")


# ---------------------------------------------------------------------------- at the end of optimize


@pytest.mark.anyio
async def test_a_server_that_cannot_give_the_report_costs_the_report_not_the_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    run = RunDir(tmp_path / "run")
    run.create()
    async with Client(create_server(settings_for(tmp_path), NoEvaluations)) as client:
        written = await write_run_report(ToolSession(client, "a test server"), run, 4242, {})
    assert written is None and not run.report_file.exists() and not run.tree_file.exists()
    assert "no report written: trees://4242/report on a test server" in caplog.text
    assert "no search tree 4242" in caplog.text


@pytest.mark.slow
def test_optimize_writes_tree_json_and_the_report_and_names_the_report_in_its_last_words(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KERNELCRAFT_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("KERNELCRAFT_DB", raising=False)
    out = tmp_path / "run"
    task = Path(__file__).resolve().parents[2] / "examples" / "layernorm" / "task.py"
    opts = OptimizeOptions(
        task=task, steps=2, llm=LLMConfig(kind="none"), out=out, db_path=tmp_path / "kc.db"
    )
    summary = asyncio.run(optimize(opts))
    assert summary["report"] == str(out / "report.html")
    assert json.loads((out / "summary.json").read_text())["report"] == summary["report"]
    assert f"Report: {out / 'report.html'} (open it in a browser)" in capsys.readouterr().err
    report = from_run_dir(out)  # tree.json, steps.jsonl and summary.json alone redraw it
    assert report.tree_id == summary["tree_id"] and len(report.nodes) == 4  # root, seed, two steps
    assert all(n.proposer == "tuner" for n in report.nodes if n.kind != "root" and not n.seed)
    assert report.seed_code == (task.parent / "seed.py").read_text()
    page = (out / "report.html").read_text()
    assert page == render_html(report)  # the command redraws exactly what optimize wrote


def test_the_page_says_why_the_best_kernel_runs_as_it_does_from_its_verdict() -> None:
    """Issue 29: the report says why too. The best node's verdict on a GPU carries its compiled
    kernels (compile stage) and the profile's words; an older verdict without the words gets them
    made from its compile result."""
    from kernelcraft.schema.evaluation import CompileResult, KernelCompileInfo, TargetCompileResult

    view = gpu_view()
    best = next(n for n in view.nodes if n.id == 3)
    assert best.verdict is not None
    kernel = KernelCompileInfo(name="add_kernel", registers=40, shared_bytes=0, num_warps=4, dots="fma")
    best.verdict.compile = CompileResult(
        ok=True, targets=[TargetCompileResult(target="sm_90a", ok=True, kernels=[kernel])]
    )
    report = from_tree(view, seed_code=SEED, best_code=BEST)
    assert len(report.best_why) == 1
    line = report.best_why[0]
    assert (
        line.startswith("kernel add_kernel on sm_90a: 40 registers per thread, 4 warps")
        and "CUDA cores" in line
    )
    assert escape(line) in render_html(report) and "why it runs as it does" in render_html(report)
    best.verdict.profile.why = ["kernel add_kernel on sm_90a: as the profile said"]  # type: ignore[union-attr]
    assert from_tree(view, seed_code=SEED, best_code=BEST).best_why == [
        "kernel add_kernel on sm_90a: as the profile said"
    ]
    assert from_tree(gpu_view(), seed_code=SEED, best_code=BEST).best_why == []  # no compile: nothing said


def test_the_page_states_the_fraction_of_the_roofline_the_best_kernel_reaches() -> None:
    """Issue 41: the report says how far the best kernel is from its floor and on what terms."""
    from kernelcraft.engine.measure.roofline import roofline

    view = gpu_view()
    best = next(n for n in view.nodes if n.id == 3)
    assert best.verdict is not None and best.verdict.profile is not None
    prof = best.verdict.profile
    prof.roofline = roofline("sm_90a", flops=2 * 1024**3, bytes=3 * 4 * 1024**2, precision_name="bf16x3")
    prof.roofline.rtol = 1e-4
    prof.roofline_fraction = prof.roofline.floor_us / 50.0
    report = from_tree(view, seed_code=SEED, best_code=BEST)
    words = report.node(3).roofline if report.node(3) else None
    assert words is not None and words.startswith(
        f"{prof.roofline_fraction:.0%} of the roofline floor (compute-bound"
    )
    assert "bf16x3 at 330 TFLOP/s, the fastest precision within rtol 0.0001" in words
    assert escape(words) in render_html(report)
