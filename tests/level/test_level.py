"""`kernelcraft level`: a folder of tasks against a folder of candidates, fast_p, resuming, the
baseline mode, KernelBench's JSON files and the `evaluate_level` MCP tool.

The fixtures (`tests/fixtures/level/`, see its README) are four tiny tasks in KernelBench's format:
one correct candidate, one wrong, one missing, one that does not compile.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from server_support import settings_for

from kernelcraft.base import knobs
from kernelcraft.base.errors import UsageError
from kernelcraft.engine.host.local import LocalEvaluator
from kernelcraft.level import kernelbench
from kernelcraft.level.runner import LevelRun, read_results, run_level, summarize, write_files
from kernelcraft.level.score import fast_p, geomean
from kernelcraft.level.tasks import find_tasks, match_candidates, parse_problems
from kernelcraft.schema.evaluation import EvalJob, Timing
from kernelcraft.schema.level import TaskOutcome
from kernelcraft.server.app import create_server

ROOT = Path(__file__).resolve().parents[2]
LEVEL = ROOT / "tests" / "fixtures" / "level"
TASKS, CANDIDATES = LEVEL / "level1", LEVEL / "candidates"
EXPECTED = {
    "1_Scaled_add.py": ("correct", None, True),
    "2_ReLU.py": ("incorrect", "numerical_mismatch", True),
    "3_Scale.py": ("missing", None, False),
    "4_Negate.py": ("incorrect", "load_error", False),
}


def verdicts(tasks: list[dict[str, Any]]) -> dict[str, tuple[str, str | None, bool]]:
    return {t["name"]: (t["status"], t["failure_class"], t["compiled"]) for t in tasks}


# ---------------------------------------------------------------------------- tasks and candidates


def test_candidates_match_by_file_name_problem_id_prefix_or_kernelbench_run_name() -> None:
    matched = match_candidates(find_tasks(TASKS), CANDIDATES)
    assert [(t.problem_id, t.name, t.candidate.name if t.candidate else None) for t in matched.tasks] == [
        (1, "1_Scaled_add.py", "1_Scaled_add.py"),
        (2, "2_ReLU.py", "2_relu_triton.py"),
        (3, "3_Scale.py", None),
        (4, "4_Negate.py", "level_1_problem_4_sample_0_kernel.py"),
    ]
    assert (matched.unmatched, matched.left_out) == ([], [])


def with_a_stray_candidate(tmp_path: Path) -> Path:
    """The fixture's candidates (for problems 1, 2 and 4; none for 3) and one file matching no task."""
    cands = tmp_path / "candidates"
    shutil.copytree(CANDIDATES, cands)
    (cands / "notes_scratch.py").write_text("class ModelNew: pass\n")
    return cands


def test_candidates_of_tasks_problems_leaves_out_are_not_taken_for_ones_that_match_none(
    tmp_path: Path,
) -> None:
    matched = match_candidates(find_tasks(TASKS), with_a_stray_candidate(tmp_path), {4})
    assert [(t.problem_id, t.candidate.name if t.candidate else None) for t in matched.tasks] == [
        (4, "level_1_problem_4_sample_0_kernel.py")
    ]
    assert matched.left_out == ["1_Scaled_add.py", "2_relu_triton.py"]
    assert matched.unmatched == ["notes_scratch.py"]


def test_two_candidates_for_one_problem_is_a_usage_error_naming_both(tmp_path: Path) -> None:
    for name in ("2_a.py", "2_b.py", "9_nothing.py"):
        (tmp_path / name).write_text("class ModelNew: pass\n")
    with pytest.raises(UsageError, match=r"2_ReLU.py has 2 candidates \(2_a.py, 2_b.py\)"):
        match_candidates(find_tasks(TASKS), tmp_path)


def test_problem_ids_select_tasks_and_an_unknown_one_is_refused() -> None:
    assert parse_problems("1-3, 7") == {1, 2, 3, 7}
    assert [t.problem_id for t in find_tasks(TASKS, {2, 4})] == [2, 4]
    with pytest.raises(UsageError, match="no task has problem id 9"):
        find_tasks(TASKS, {9})
    with pytest.raises(UsageError, match="e.g. 1-10,19"):
        parse_problems("one")


def test_a_baseline_job_asks_for_nothing_else() -> None:
    with pytest.raises(ValueError, match="baseline stage times the reference alone"):
        EvalJob(task_source="x", stages=["baseline", "verify"])
    assert EvalJob(task_source="x", stages=["baseline"]).baseline_only


# ---------------------------------------------------------------------------- scores


def timing(us: float) -> Timing:
    return Timing(median_us=us, iqr_us=us / 100, min_us=us * 0.98, reps=50, method="cuda_events")


def timed_outcome(
    pid: int, cand_us: float | None, eager_us: float, compiled_us: float, **kw: Any
) -> TaskOutcome:
    correct = cand_us is not None
    return TaskOutcome(
        problem_id=pid,
        name=f"{pid}_Task.py",
        candidate=f"{pid}_Task.py",
        status="correct" if correct else kw.pop("status", "incorrect"),
        compiled=correct,
        candidate_time=timing(cand_us) if cand_us is not None else None,
        eager=timing(eager_us),
        compiled_ref=timing(compiled_us),
        speedup_vs_eager=eager_us / cand_us if cand_us is not None else None,
        speedup_vs_compiled=compiled_us / cand_us if cand_us is not None else None,
        device="cuda:0 (NVIDIA H200)",
        timed=True,
        **kw,
    )


# Four tasks: 2x and 0.8x faster than eager (both correct), one wrong, one missing.
TIMED = [
    timed_outcome(1, 10.0, 20.0, 12.0),
    timed_outcome(2, 25.0, 20.0, 30.0),
    timed_outcome(3, None, 20.0, 15.0),
    timed_outcome(4, None, 40.0, 35.0, status="missing"),
]


def test_fast_p_counts_every_task_in_the_denominator_failures_and_missing_included() -> None:
    by_p = {f.p: (f.vs_eager, f.vs_compiled) for f in fast_p(TIMED, timed=True)}
    assert by_p == {0.0: (0.5, 0.5), 0.5: (0.5, 0.5), 1.0: (0.25, 0.5), 1.5: (0.25, 0.0), 2.0: (0.0, 0.0)}
    assert geomean([o.speedup_vs_eager for o in TIMED]) == pytest.approx((2.0 * 0.8) ** 0.5)


def test_without_timings_fast_p_is_only_p0_the_fraction_correct() -> None:
    outcomes = [o.model_copy(update={"speedup_vs_eager": None, "speedup_vs_compiled": None}) for o in TIMED]
    assert [(f.p, f.vs_eager) for f in fast_p(outcomes, timed=False)] == [(0.0, 0.5)]


def test_kernelbench_analysis_reads_our_files_and_finds_our_fast_p(tmp_path: Path) -> None:
    """Read eval_results.json and the baseline file as KernelBench's
    scripts/benchmark_eval_analysis.py does: sample 0 of each problem id, absent ids patched in as
    not compiled and not correct, baseline_results[f"level{level}"][problem file name]["mean"],
    then its score.fastp (speedup = baseline / runtime over the correct, `> p`, over all tasks)."""
    run = LevelRun(tasks_dir=tmp_path / "level1", out_dir=tmp_path / "my_run", candidates_dir=tmp_path)
    run.out_dir.mkdir()
    summary = summarize(run, TIMED, timed=True, resumed=0, unmatched=[])
    write_files(run, summary)

    eval_results = json.loads((run.out_dir / "eval_results.json").read_text())
    baseline = json.loads((run.out_dir / kernelbench.BASELINE_EAGER).read_text())
    entries = {}
    for key, samples in eval_results.items():
        entry = [r for r in samples if r["sample_id"] == 0]
        assert len(entry) == 1
        entries[key] = entry[0]
    for pid in (1, 2, 3, 4):  # their patch(): a problem without results
        entries.setdefault(str(pid), {"compiled": False, "correctness": False, "runtime": -1.0})
    names = {o.problem_id: o.name for o in TIMED}
    rows = [
        (
            entries[str(pid)]["correctness"],
            baseline["level1"][names[pid]]["mean"],
            entries[str(pid)]["runtime"],
        )
        for pid in sorted(names)
    ]
    for p in (0.0, 0.5, 1.0, 1.5, 2.0):
        theirs = sum(1 for ok, base, ours in rows if ok and base / ours > p) / len(rows)
        ours = next(f.vs_eager for f in summary.fast_p if f.p == p)
        assert theirs == pytest.approx(ours), p
    assert (entries["1"]["compiled"], entries["3"]["compiled"], entries["3"]["correctness"]) == (
        True,
        False,
        False,
    )
    assert entries["1"]["runtime_stats"]["hardware"] == "NVIDIA H200"
    compiled = json.loads((run.out_dir / kernelbench.BASELINE_COMPILED).read_text())
    assert compiled["level1"]["1_Task.py"]["mean"] == 0.012  # ms, from the 12 µs median


# ---------------------------------------------------------------------------- end to end (CPU)


def cli(*args: str, timeout: float = 400) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kernelcraft", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


@pytest.mark.slow
def test_the_level_command_gives_each_task_its_verdict_and_a_rerun_skips_them_all(tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ["level", str(TASKS), str(CANDIDATES), "--out", str(out), "--device", "cpu", "--jobs", "1"]
    first = cli(*args, "--trials", "2", "--json")
    assert first.returncode == 0, first.stderr
    summary = json.loads(first.stdout)
    assert verdicts(summary["tasks"]) == EXPECTED
    assert (summary["total"], summary["correct"], summary["missing"], summary["timed"]) == (4, 1, 1, False)
    assert summary["fast_p"] == [{"p": 0.0, "vs_eager": 0.25, "vs_compiled": 0.25}]
    assert "timings need a CUDA GPU" in summary["message"]
    assert "[4/4" in first.stderr and "1_Scaled_add.py: correct" in first.stderr  # one line a task
    kb = json.loads((out / "eval_results.json").read_text())
    assert (
        sorted(kb) == ["1", "2", "4"]
        and kb["1"][0]["correctness"] is True
        and kb["4"][0]["compiled"] is False
    )

    again = cli(*args, "--trials", "2")
    assert again.returncode == 0, again.stderr
    assert "4 outcomes were read from an earlier run" in again.stdout
    assert len(read_results(out / "results.jsonl")) == 4  # nothing evaluated twice


@pytest.mark.slow
def test_the_level_command_with_problems_counts_exactly_what_it_evaluated_and_left_out(
    tmp_path: Path,
) -> None:
    cands = with_a_stray_candidate(tmp_path)
    args = ["level", str(TASKS), str(cands), "--out", str(tmp_path / "run"), "--device", "cpu", "--jobs", "1"]
    ran = cli(*args, "--problems", "3-4", "--trials", "1")
    assert ran.returncode == 0, ran.stderr
    assert "0 of 2 correct, 0 compiled, 1 missing, 0 unusable tasks" in ran.stdout
    assert "2 candidates of tasks --problems left out (not evaluated)" in ran.stdout
    assert "candidates that match no task (not evaluated): notes_scratch.py\n" in ran.stdout
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert [t["name"] for t in summary["tasks"]] == ["3_Scale.py", "4_Negate.py"]
    assert (summary["total"], summary["missing"], summary["correct"]) == (2, 1, 0)
    assert summary["candidates_left_out"] == ["1_Scaled_add.py", "2_relu_triton.py"]
    assert summary["unmatched_candidates"] == ["notes_scratch.py"]
    assert len(read_results(tmp_path / "run" / "results.jsonl")) == 2


@pytest.mark.slow
def test_a_changed_candidate_is_evaluated_again_and_the_rest_resumed(tmp_path: Path, evaluator: Any) -> None:
    cands = tmp_path / "candidates"
    shutil.copytree(CANDIDATES, cands)
    run = LevelRun(tasks_dir=TASKS, out_dir=tmp_path / "run", candidates_dir=cands, trials=1, jobs=1)
    first = evaluator.call(run_level(evaluator.evaluator, run))
    assert verdicts([t.model_dump(mode="json") for t in first.tasks]) == EXPECTED
    (cands / "2_relu_triton.py").unlink()
    shutil.copy(
        CANDIDATES / "1_Scaled_add.py", cands / "2_relu_triton.py"
    )  # now fails to build: wrong init args
    second = evaluator.call(run_level(evaluator.evaluator, run))
    assert second.resumed == 3
    redone = next(t for t in second.tasks if t.problem_id == 2)
    assert redone.status == "incorrect" and redone.failure_class is not None
    assert redone.failure_class.value != "numerical_mismatch"
    assert len(read_results(run.out_dir / "results.jsonl")) == 5


@pytest.mark.slow
def test_baseline_mode_without_a_gpu_loads_every_reference_and_gives_its_roofline_floor(
    tmp_path: Path, evaluator: Any
) -> None:
    run = LevelRun(tasks_dir=TASKS, out_dir=tmp_path / "base", jobs=1)
    summary = evaluator.call(run_level(evaluator.evaluator, run))
    assert summary.mode == "baseline" and summary.fast_p == [] and not summary.timed
    assert [t.status for t in summary.tasks] == ["untimed"] * 4
    assert all(t.floor_us is not None and t.floor_us > 0 for t in summary.tasks)
    assert all("needs a CUDA GPU" in (t.message or "") for t in summary.tasks)
    assert "kernelbench_baseline_eager" not in summary.files  # no timings, no baseline file
    # where each task's seconds went, and the run's sum of them
    assert all(t.stage_seconds for t in summary.tasks) and summary.jobs == 1
    for stage, total in summary.stage_seconds.items():
        assert total == pytest.approx(sum(t.stage_seconds.get(stage, 0) for t in summary.tasks), abs=0.01)


@pytest.mark.slow
def test_a_task_whose_reference_cannot_be_built_is_a_task_error_not_a_crash(
    tmp_path: Path, evaluator: Any
) -> None:
    tasks = tmp_path / "level9"
    tasks.mkdir()
    broken = (TASKS / "3_Scale.py").read_text().replace("return [factor]", "return [factor, 1, 2]")
    (tasks / "1_Broken.py").write_text(broken)
    summary = evaluator.call(
        run_level(evaluator.evaluator, LevelRun(tasks_dir=tasks, out_dir=tmp_path / "o"))
    )
    (task,) = summary.tasks
    assert task.status == "task_error" and task.message
    assert summary.task_errors == 1


def test_the_command_needs_candidates_or_baseline_and_says_so(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from kernelcraft.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["level", str(TASKS), "--out", str(tmp_path / "o")])
    assert exited.value.code == 2
    assert "or --baseline to time the references alone" in capsys.readouterr().err


# ---------------------------------------------------------------------------- the MCP tool


@pytest.fixture(scope="module")
async def local_evaluator() -> AsyncIterator[LocalEvaluator]:
    evaluator = LocalEvaluator(settings=knobs.settings(), workers=2, device="cpu")
    try:
        yield evaluator
    finally:
        await evaluator.aclose()


@pytest.mark.slow
@pytest.mark.anyio
async def test_evaluate_level_over_mcp_reports_progress_per_task_and_the_summary(
    tmp_path: Path, local_evaluator: LocalEvaluator
) -> None:
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    arguments = {"tasks_dir": str(TASKS), "candidates_dir": str(CANDIDATES), "out_dir": str(tmp_path / "o")}
    async with Client(create_server(settings_for(tmp_path), lambda _: local_evaluator)) as client:
        with anyio.fail_after(300):
            result = await client.call_tool("evaluate_level", arguments, progress_callback=on_progress)
    assert not result.is_error, result.content
    summary = result.structured_content
    assert summary is not None
    assert verdicts(summary["tasks"]) == EXPECTED and summary["fast_p"][0]["vs_eager"] == 0.25
    assert [p for p, _, _ in seen] == sorted(p for p, _, _ in seen) and seen[-1][:2] == (4, 4)
    assert any(m and m.startswith("2_ReLU.py: incorrect") for _, _, m in seen)


@pytest.mark.anyio
async def test_evaluate_level_is_refused_to_an_http_client(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from server_support import NoEvaluations

    import kernelcraft.server.tools.level as level_tool

    monkeypatch.setattr(level_tool, "client_name", lambda: "alice")
    async with Client(create_server(settings_for(tmp_path), NoEvaluations)) as client:
        result = await client.call_tool("evaluate_level", {"tasks_dir": str(TASKS), "out_dir": str(tmp_path)})
    assert result.is_error
    assert "ask the server's operator to evaluate the level" in result.content[0].text  # type: ignore[union-attr]


# ---------------------------------------------------------------------------- on the GPU (H200)


@pytest.mark.gpu
@pytest.mark.anyio
async def test_on_a_gpu_a_level_run_times_each_task_and_the_baseline_times_the_reference_alone(
    tmp_path: Path,
) -> None:
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    async with LocalEvaluator(settings=knobs.settings(), workers=4, device="cuda") as ev:
        runs = LevelRun(tasks_dir=TASKS, out_dir=tmp_path / "c", candidates_dir=CANDIDATES, trials=2)
        summary = await run_level(ev, runs)
        base = await run_level(ev, LevelRun(tasks_dir=TASKS, out_dir=tmp_path / "b"))
    assert summary.timed and [f.p for f in summary.fast_p] == [0.0, 0.5, 1.0, 1.5, 2.0]
    (correct,) = [t for t in summary.tasks if t.status == "correct"]
    assert correct.candidate_time and correct.eager and correct.compiled_ref and correct.speedup_vs_eager
    assert summary.fast_p[0].vs_eager == 0.25
    assert [t.status for t in base.tasks] == ["timed"] * 4
    assert all(t.eager and t.compiled_ref for t in base.tasks)
    # torch.compile compiled before the gate (no lock), then timed alone (engine/worker/refcompile.py)
    # A task whose reference worker was kept from the candidates' run (no "reference" load) had
    # its model compiled there: on the H200, 2_ReLU's stages were other, baseline, gpu_wait, timing.
    assert all("timing" in t.stage_seconds for t in base.tasks), [t.stage_seconds for t in base.tasks]
    fresh = [t for t in base.tasks if "reference" in t.stage_seconds]
    assert fresh and all("reference_compile" in t.stage_seconds for t in fresh), [
        t.stage_seconds for t in fresh
    ]
    assert not [t.name for t in base.tasks if "compiled no frame" in (t.message or "")]
    files = json.loads((tmp_path / "b" / kernelbench.BASELINE_EAGER).read_text())
    assert sorted(files["level1"]) == sorted(EXPECTED)


def test_a_failed_tasks_outcome_keeps_the_tail_of_its_error_text() -> None:
    from kernelcraft.base.failures import FailureClass
    from kernelcraft.level.runner import from_result
    from kernelcraft.schema.evaluation import EvalResult, Evidence, VerifyResult
    from kernelcraft.schema.level import TaskOutcome

    trace = (
        "Traceback (most recent call last):\n"
        + "  a frame\n" * 400
        + "torch.OutOfMemoryError: CUDA out of memory"
    )
    verify = VerifyResult(
        correct=False,
        status="runtime_crash",
        failure_class=FailureClass.RUNTIME_CRASH,
        evidence=Evidence(message="the candidate's process exited with code 1", error_text=trace),
        trials=5,
        device="cuda:0",
        interpreter=False,
    )
    base = TaskOutcome(
        problem_id=19, name="19_ReLU.py", candidate="19_relu.py", status="incorrect", mode="candidates"
    )
    out = from_result(base, EvalResult(verify=verify))
    assert out.error_text is not None and len(out.error_text) == 1500
    assert out.error_text.endswith("torch.OutOfMemoryError: CUDA out of memory")
