"""A level in one command: `kernelcraft optimize FOLDER` over tiny KernelBench-format tasks.

The fast tests drive the real run loop (`optimize_level` → `optimize` → the explore loop → the
in-process server and its database) with the offline tuner writing every step and the scripted
evaluator (`bench/scripted.py`) giving each candidate the verdict its seed's marker line names, so
the level's figures are known exactly. The slow ones run the real command line on the real
evaluator (Triton's CPU interpreter), killed and resumed."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from agent_fakes import Reply, Script, serve
from mcp import Client
from search_scripted import ScriptedEvaluator, candidate

from kernelcraft.agent.batch.levelplan import LevelOptions
from kernelcraft.agent.batch.levelrun import optimize_level
from kernelcraft.agent.llm.config import LLMConfig
from kernelcraft.agent.llm.judge import ModelJudge, judge_for
from kernelcraft.agent.loop.options import OptimizeOptions
from kernelcraft.agent.loop.proposers import NO_REVISER_GUIDANCE
from kernelcraft.agent.loop.session import ToolSession
from kernelcraft.base.config import Settings
from kernelcraft.base.errors import InfrastructureError, UsageError
from kernelcraft.base.knobs import Knobs, ServerSettings
from kernelcraft.cli.levelwords import render_level
from kernelcraft.engine.host.evaluator import ProgressCallback
from kernelcraft.schema.evaluation import EvalJob, EvalResult
from kernelcraft.server.app import create_server

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures" / "tasks"
TASK = (FIXTURES / "vector_add.py").read_text()
SEED = (FIXTURES / "vector_add_triton.py").read_text().replace("BLOCK", "BLOCK_SIZE")

# problem id -> (file stem, the seed's scripted verdict: speedup vs eager, vs torch.compile)
VERDICTS = {
    1: ("1_Add", "correct 2.5 1.2"),
    2: ("2_AddAgain", "correct 1.5 0.8"),
    3: ("3_AddWrong", "wrong"),
    4: ("4_AddSlow", "correct 0.5 0.4"),
}


def make_level(folder: Path, ids: tuple[int, ...] = (1, 2, 3, 4)) -> Path:
    """KernelBench-format tasks `<id>_<Name>.py`, each with its seed `<id>_<Name>_seed.py`."""
    folder.mkdir(parents=True)
    for i in ids:
        stem, verdict = VERDICTS[i]
        (folder / f"{stem}.py").write_text(TASK)
        (folder / f"{stem}_seed.py").write_text(f"# verdict: {verdict}\n{SEED}")
    return folder


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("KERNELCRAFT_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("KERNELCRAFT_DB", raising=False)
    return tmp_path


def level_options(folder: Path, out: Path, db: Path, **kw: object) -> LevelOptions:
    run = OptimizeOptions(
        task=folder,  # replaced per task
        steps=2,
        llm=LLMConfig(kind="none"),
        db_path=db,
        compile_check=False,
        progress=False,
    )
    return LevelOptions(tasks_dir=folder, run=run, out=out, **kw)  # type: ignore[arg-type]


@asynccontextmanager
async def scripted_session(db: Path, evaluator: object) -> AsyncIterator[ToolSession]:
    async with Client(create_server(Settings(db_path=db), lambda _: evaluator)) as client:  # type: ignore[arg-type,return-value]
        yield ToolSession(client, "the scripted server")


def steps_of(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "steps.jsonl").read_text().splitlines()]


@pytest.mark.anyio
async def test_two_tasks_of_a_folder_optimise_in_one_command_each_in_its_tree_over_one_rulebook(
    home: Path,
) -> None:
    folder = make_level(home / "level2", (1, 2))
    out, db = home / "run", home / "kc.db"
    async with scripted_session(db, ScriptedEvaluator(has_gpu=True)) as session:
        summary = await optimize_level(level_options(folder, out, db, tasks_parallel=2), session=session)
    assert [t.name for t in summary.tasks] == ["1_Add.py", "2_AddAgain.py"]  # the seeds are no tasks
    assert summary.finished == summary.total == 2 and summary.done_earlier == summary.resumed == 0
    runs = [json.loads((out / stem / "run.json").read_text()) for stem in ("1_Add", "2_AddAgain")]
    assert runs[0]["tree_id"] != runs[1]["tree_id"]  # a tree per task ...
    assert {r["db_path"] for r in runs} == {str(db.resolve())}  # ... in one database: one rulebook
    with sqlite3.connect(db) as conn:
        names = {row[0] for row in conn.execute("SELECT task_name FROM trees")}
    assert names == {"1_Add.py", "2_AddAgain.py"}
    assert all(len(steps_of(out / stem)) == 2 for stem in ("1_Add", "2_AddAgain"))
    page = (out / "report.html").read_text()
    assert 'href="1_Add/report.html"' in page and 'href="2_AddAgain/report.html"' in page
    assert (out / "1_Add" / "report.html").is_file()
    assert json.loads((out / "summary.json").read_text())["total"] == 2


@pytest.mark.anyio
async def test_the_summarys_counts_fast_p_and_geomean_are_exact_for_known_verdicts(home: Path) -> None:
    folder = make_level(home / "level2")
    out, db = home / "run", home / "kc.db"
    async with scripted_session(db, ScriptedEvaluator(has_gpu=True)) as session:
        s = await optimize_level(level_options(folder, out, db, tasks_parallel=3), session=session)
    assert (s.total, s.correct, s.correct_rate, s.timed) == (4, 3, 0.75, True)
    by_p = {f.p: (f.vs_eager, f.vs_compiled) for f in s.fast_p}
    # correct and faster than p: eager 2.5, 1.5, 0.5 (task 3 wrong); torch.compile 1.2, 0.8, 0.4
    assert by_p == {0.0: (0.75, 0.75), 0.5: (0.5, 0.5), 1.0: (0.5, 0.25), 1.5: (0.25, 0.0), 2.0: (0.25, 0.0)}
    assert s.geomean_speedup_vs_eager == pytest.approx((2.5 * 1.5 * 0.5) ** (1 / 3))
    assert s.geomean_speedup_vs_compiled == pytest.approx((1.2 * 0.8 * 0.4) ** (1 / 3))
    speeds = {t.problem_id: (t.correct, t.speedup_vs_eager, t.speedup_vs_compiled) for t in s.tasks}
    assert speeds == {1: (True, 2.5, 1.2), 2: (True, 1.5, 0.8), 3: (False, None, None), 4: (True, 0.5, 0.4)}
    assert s.tokens == 0 and s.gpu_seconds is not None  # the tuner wrote every step: no tokens
    rows = {line.split()[0]: line.split()[1:] for line in render_level(s).splitlines() if line.strip()}
    assert rows["fast_1"] == ["0.50", "0.25"] and rows["fast_2"] == ["0.25", "0.00"]
    assert rows["correct"] == ["3", "of", "4", "(75%)"] and rows["geomean"] == ["speedup", "1.23×", "0.73×"]


@pytest.mark.anyio
async def test_without_a_gpu_the_speed_figures_say_unknown_rather_than_zero(home: Path) -> None:
    folder = make_level(home / "level1", (1, 3))
    out, db = home / "run", home / "kc.db"
    async with scripted_session(db, ScriptedEvaluator(has_gpu=False)) as session:
        s = await optimize_level(level_options(folder, out, db), session=session)
    assert (s.correct, s.timed, s.gpu_seconds, s.geomean_speedup_vs_eager) == (1, False, None, None)
    assert [(f.p, f.vs_eager) for f in s.fast_p] == [
        (0.0, 0.5),
        (0.5, None),
        (1.0, None),
        (1.5, None),
        (2.0, None),
    ]
    text = render_level(s)
    fast_1 = next(line for line in text.splitlines() if line.startswith("fast_1"))
    assert "unknown (no GPU)" in fast_1 and "0.00" not in fast_1
    assert "speed was not measured" in text
    assert "unknown (no GPU)" in (out / "report.html").read_text()


@pytest.mark.anyio
async def test_problems_choose_exactly_those_tasks(home: Path) -> None:
    folder = make_level(home / "level2")
    out, db = home / "run", home / "kc.db"
    async with scripted_session(db, ScriptedEvaluator(has_gpu=True)) as session:
        s = await optimize_level(level_options(folder, out, db, problems={1, 3}), session=session)
        with pytest.raises(UsageError, match="no task has problem id 7"):
            await optimize_level(level_options(folder, out, db, problems={1, 7}), session=session)
    assert [t.problem_id for t in s.tasks] == [1, 3] and s.total == 2
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["1_Add", "3_AddWrong"]


class FailingOnce(ScriptedEvaluator):
    """The scripted evaluator, whose `fail_at`-th job is lost (a machine that went away)."""

    def __init__(self, fail_at: int) -> None:
        super().__init__(has_gpu=True)
        self.fail_at = fail_at

    async def submit(self, job: EvalJob, progress: ProgressCallback | None = None) -> EvalResult:
        if len(self.jobs) + 1 == self.fail_at:
            self.jobs.append(job)
            raise InfrastructureError("the evaluator's machine went away")
        return await super().submit(job, progress)


@pytest.mark.anyio
async def test_a_stopped_level_resumes_its_unfinished_task_and_skips_the_finished_one(home: Path) -> None:
    folder = make_level(home / "level2", (1, 2))
    out, db = home / "run", home / "kc.db"
    # one task at a time: task 1 (seed + 2 steps = 3 jobs) finishes, task 2's first step is lost
    async with scripted_session(db, FailingOnce(fail_at=5)) as session:
        first = await optimize_level(level_options(folder, out, db, tasks_parallel=1), session=session)
    assert [t.state for t in first.tasks] == ["finished", "error"]
    assert "went away" in (first.tasks[1].message or "")
    done_before = steps_of(out / "1_Add")
    tree_2 = json.loads((out / "2_AddAgain" / "run.json").read_text())["tree_id"]

    said: list[str] = []

    async def progress(done: int, total: int, message: str) -> None:
        said.append(message)

    async with scripted_session(db, ScriptedEvaluator(has_gpu=True)) as session:
        second = await optimize_level(
            level_options(folder, out, db, tasks_parallel=1), progress, session=session
        )
    assert said[0].startswith(
        f"Resuming the level run in {out}: 1 of 2 tasks finished earlier (skipped), 1 resumed"
    )
    assert [t.this_run for t in second.tasks] == ["done earlier", "resumed"]
    assert [t.state for t in second.tasks] == ["finished", "finished"]
    assert steps_of(out / "1_Add") == done_before  # nothing redone
    assert json.loads((out / "2_AddAgain" / "run.json").read_text())["tree_id"] == tree_2  # the same tree
    assert len(steps_of(out / "2_AddAgain")) == 2
    assert render_level(second).splitlines()[0].startswith("Resumed the level run in")
    assert (second.correct, second.fast(1.0).vs_eager) == (2, 1.0)  # type: ignore[union-attr]


def test_the_figures_of_a_level_never_print_zero_for_what_was_not_measured() -> None:
    from kernelcraft.schema.levelrun import LevelRunSummary, OptimizedTask

    s = LevelRunSummary(
        tasks_dir="l", out_dir="o", preset="adaexplore", steps_per_task=50, llm="anthropic", timed=False,
        total=1, correct=1, correct_rate=1.0,
        tasks=[OptimizedTask(problem_id=1, name="1_A.py", run_dir="o/1_A", state="finished", this_run="ran", correct=True)],
    )  # fmt: skip
    text = render_level(s)
    rows = {line.split()[0]: " ".join(line.split()[1:]) for line in text.splitlines() if line.strip()}
    assert rows["dollars"] == "unknown (unpriced model)" and rows["GPU"] == "seconds unknown (no GPU)"
    assert rows["geomean"] == "speedup unknown (no GPU) unknown (no GPU)"


# --------------------------------------------------------------------- the command line, for real


def cli(folder: Path, out: Path, home: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "kernelcraft", "optimize", str(folder), "--llm", "none", "--steps", "1",
        "--out", str(out), "--db", str(home / "kc.db"), "--no-compile-check", *extra,
    ]  # fmt: skip


@pytest.mark.slow
def test_the_command_line_optimises_a_folder_and_a_killed_run_resumes_without_redoing_tasks(
    home: Path,
) -> None:
    folder = home / "level1"
    folder.mkdir()
    for stem in ("1_Add", "2_AddAgain"):
        (folder / f"{stem}.py").write_text(TASK)
        (folder / f"{stem}_seed.py").write_text(SEED)
    out = home / "run"
    env = {**os.environ, "KERNELCRAFT_HOME": str(home / "home"), "PYTHONPATH": str(ROOT)}
    first = subprocess.Popen(
        cli(folder, out, home, "--tasks-parallel", "1"),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    deadline = time.monotonic() + 240
    try:  # killed once the first task has finished, while the second runs
        while not (out / "1_Add" / "summary.json").is_file():
            assert first.poll() is None, f"the run ended before it was killed: {first.stderr.read()!r}"  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "the first task did not finish within 240 s"
            time.sleep(0.1)
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
    done_before = steps_of(out / "1_Add")

    second = subprocess.run(cli(folder, out, home), env=env, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr
    assert (
        second.stderr.splitlines()[0].startswith("[")
        and "1 of 2 tasks finished earlier" in (second.stderr.splitlines()[0])
    )
    assert second.stdout.splitlines()[0].startswith(f"Resumed the level run in {out}: 1 of 2 tasks")
    assert steps_of(out / "1_Add") == done_before
    assert (out / "2_AddAgain" / "summary.json").is_file() and (out / "report.html").is_file()
    third = subprocess.run(
        cli(folder, out, home, "--problems", "2", "--json"),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert third.returncode == 0, third.stderr
    summary = json.loads(third.stdout)
    assert [t["name"] for t in summary["tasks"]] == ["2_AddAgain.py"] and summary["done_earlier"] == 1
    assert summary["fast_p"][2] == {"p": 1.0, "vs_eager": None, "vs_compiled": None}  # no GPU: unknown


# ------------------------------------------------------------------ the adapt phase, then explore

RULE = "You cannot call tl.tanh in a Triton kernel."
NOT_A_DUPLICATE = {"is_duplicate": False, "matched_index": None, "confidence": 0.9, "reason": "new"}


def failing_model() -> Script:
    """A model whose every kernel and edit fails to compile, and which distils the same rule."""
    script = Script()
    script.fallback.update(
        submit_kernel=Reply({"code": candidate("compile", "the model's kernel")}),
        submit_edits=Reply({"edits": [{"old": "# verdict: correct", "new": "# verdict: compile #"}]}),
        propose_improvements=Reply({"items": ["Use tl.tanh."]}),
        propose_rule=Reply({"text": RULE}),
        judge_duplicate=Reply(NOT_A_DUPLICATE),
    )
    return script


@asynccontextmanager
async def judged_session(db: Path, judge: ModelJudge) -> AsyncIterator[ToolSession]:
    # one evaluated failure activates a rule
    settings = Settings(db_path=db, knobs=Knobs(server=ServerSettings(rule_activation=1)))
    server = create_server(settings, lambda _: ScriptedEvaluator(has_gpu=True), judge=judge)  # type: ignore[arg-type,return-value]
    async with Client(server) as client:
        yield ToolSession(client, "the scripted server")


@pytest.mark.anyio
async def test_a_level_adapts_into_its_rulebook_before_exploring_and_a_rerun_skips_the_finished_phase(
    home: Path,
) -> None:
    folder = make_level(home / "level2", (1, 2))
    out, db = home / "run", home / "kc.db"
    script = failing_model()
    with serve(script) as base:
        llm = LLMConfig(
            kind="openai", model="m", base_url=f"{base}/v1", api_key_env="none", sdk_max_retries=0
        )
        opts = level_options(folder, out, db, tasks_parallel=2, adapt_steps=1)
        opts.run.llm = llm
        judge = judge_for(llm, server_url=None)
        assert judge is not None
        async with judged_session(db, judge) as session:
            first = await optimize_level(opts, session=session, judge=judge)
        rules_proposed = len(script.requests_for("propose_rule"))
        judged = len(script.requests_for("judge_duplicate"))
        adapt_steps = {stem: steps_of(out / "adapt" / stem) for stem in ("1_Add", "2_AddAgain")}

        async with judged_session(db, judge) as session:
            second = await optimize_level(opts, session=session, judge=judge)
        await judge.aclose()  # the judge is its builder's to close, as the session is

    phase = first.adapt
    assert phase is not None and (phase.state, phase.this_run, phase.tasks, phase.steps_per_task) == (
        "finished",
        "ran",
        2,
        1,
    )
    # each task's one adapt step failed to compile and the model distilled the rule: counted twice
    assert all(len(s) == 1 and s[0]["outcome"] == "not_compiled" for s in adapt_steps.values())
    assert rules_proposed == 2 and judged == 2  # only adapt learns; each rule went to the judge
    assert [(r.text, r.count, r.gained, r.status) for r in phase.rules_learnt] == [(RULE, 2, 2, "active")]
    # its tokens: its explores' (each task's run) and the judge's two calls (1,200 tokens each)
    explores = sum(
        json.loads((out / "adapt" / stem / "summary.json").read_text())["usage"]["total_tokens"]
        for stem in ("1_Add", "2_AddAgain")
    )
    assert explores > 0 and phase.tokens == explores + 2 * 1200 and phase.cost_usd is None  # unpriced
    # then the explore ran every task, its own trees beside the adapt's
    assert first.finished == first.total == 2 and all(
        len(steps_of(out / s)) == 2 for s in ("1_Add", "2_AddAgain")
    )
    assert json.loads((out / "summary.json").read_text())["adapt"]["rules_learnt"][0]["text"] == RULE
    assert "Adapt phase: finished, 2 tasks at 1 step, 1 active rules learnt" in render_level(first)

    # the rerun: the finished phase is not redone (no model call, no step), its figures kept
    assert second.adapt is not None and second.adapt.this_run == "done earlier"
    assert second.adapt.rules_learnt == phase.rules_learnt and second.adapt.tokens == phase.tokens
    assert len(script.requests_for("propose_rule")) == rules_proposed
    assert len(script.requests_for("judge_duplicate")) == judged
    assert {stem: steps_of(out / "adapt" / stem) for stem in adapt_steps} == adapt_steps


@pytest.mark.anyio
async def test_without_a_model_or_with_zero_steps_the_adapt_phase_is_skipped_and_says_why(home: Path) -> None:
    folder = make_level(home / "level2", (1,))
    db = home / "kc.db"
    async with scripted_session(db, ScriptedEvaluator(has_gpu=True)) as session:
        no_model = await optimize_level(level_options(folder, home / "a", db), session=session)
        zero = await optimize_level(level_options(folder, home / "b", db, adapt_steps=0), session=session)
    assert no_model.adapt is not None and no_model.adapt.state == "skipped"
    assert "--llm none" in (no_model.adapt.message or "") and not (home / "a" / "adapt").exists()
    assert zero.adapt is not None and zero.adapt.message == "--adapt-steps 0"
    assert "Adapt phase: skipped (--adapt-steps 0)." in render_level(zero)


@pytest.mark.anyio
async def test_under_adaexplore_the_adapt_phase_runs_with_adaexplores_adapt_constants_and_no_reviser(
    home: Path,
) -> None:
    folder = make_level(home / "level2", (1,))
    out, db = home / "run", home / "kc.db"
    script = failing_model()
    with serve(script) as base:
        llm = LLMConfig(
            kind="openai", model="m", base_url=f"{base}/v1", api_key_env="none", sdk_max_retries=0
        )
        opts = level_options(folder, out, db, adapt_steps=3)
        opts.run.llm, opts.run.preset = llm, "adaexplore"
        judge = judge_for(llm, server_url=None)
        assert judge is not None
        async with judged_session(db, judge) as session:
            summary = await optimize_level(opts, session=session, judge=judge)
        await judge.aclose()
        requests = list(script.requests)
    assert summary.adapt is not None and summary.adapt.state == "finished"
    tree = json.loads((out / "adapt" / "1_Add" / "run.json").read_text())["tree_id"]
    with sqlite3.connect(db) as conn:
        params = json.loads(conn.execute("SELECT params FROM trees WHERE id = ?", (tree,)).fetchone()[0])
    assert {k: params[k] for k in ("preset", "c", "c_exp", "reward_alpha", "p_large", "reviser")} == {
        "preset": "adaexplore",
        "c": 0.25,
        "c_exp": 0.25,
        "reward_alpha": 1.0,
        "p_large": 0.25,
        "reviser": False,
    }
    kinds = [s["kind"] for s in steps_of(out / "adapt" / "1_Add")]
    assert "small" in kinds
    # no reviser call in the adapt's small steps: the tuner gets AdaExplore's fixed guidance
    edits = [
        r for r in requests if r.get("tool_choice", {}).get("function", {}).get("name") == "submit_edits"
    ]
    assert edits and NO_REVISER_GUIDANCE in edits[0]["messages"][-1]["content"]
    explore_tree = json.loads((out / "1_Add" / "run.json").read_text())["tree_id"]
    with sqlite3.connect(db) as conn:
        explore = json.loads(
            conn.execute("SELECT params FROM trees WHERE id = ?", (explore_tree,)).fetchone()[0]
        )
    assert (explore["c"], explore["reward_alpha"], explore["reviser"]) == (0.3, 0.0, True)  # explore's own


def test_a_run_stopped_by_any_of_kernelcrafts_errors_or_a_limit_is_resumed_not_counted_finished() -> None:
    from kernelcraft.agent.batch.levelplan import stopped_short

    for stop in (
        "InfrastructureError: the evaluator's machine went away",
        "StalledError: no step finished in 600 s",
        "LLM error: overloaded",
        "token budget spent (20,000 of 10,000)",
        "dollar budget spent ($1.2000 of $1.00)",
    ):
        assert stopped_short(stop), stop
    for stop in (
        "budget of 10 steps spent",
        "no new best in 5 steps (--stall 5)",
        "Error: not a class of ours",
    ):
        assert not stopped_short(stop), stop


def test_a_folder_holding_a_kernel_beside_its_task_is_refused_with_the_seed_name_that_fixes_it(
    tmp_path: Path,
) -> None:
    from kernelcraft.agent.batch.levelplan import find_level_tasks

    folder = make_level(tmp_path / "level", ids=(1, 2))
    (folder / "2_AddAgain_triton.py").write_text(SEED)  # a user's own name for the task's kernel
    with pytest.raises(UsageError, match=r"2_AddAgain_triton\.py defines ModelNew and no Model") as refused:
        find_level_tasks(folder, None)
    assert "named 2_AddAgain_seed.py beside its task; rename it so" in str(refused.value)
    (folder / "2_AddAgain_triton.py").rename(folder / "2_AddAgain_seed.py")
    assert [t.name for t in find_level_tasks(folder, None)] == ["1_Add.py", "2_AddAgain.py"]
