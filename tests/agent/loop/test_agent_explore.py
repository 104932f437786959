"""The explore loop end to end on the CPU: the in-process server, the real evaluator (Triton's
interpreter), the tuner, and Claude played by a local server speaking the Messages API."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from agent_fakes import HttpError, Reply, Script, serve
from server_support import LentEvaluator, free_port, wait_healthy

from kernelcraft.agent.batch.adapt import AdaptOptions, adapt
from kernelcraft.agent.llm.config import LLMConfig
from kernelcraft.agent.loop.explore import NoStartingKernel, optimize
from kernelcraft.agent.loop.options import OptimizeOptions
from kernelcraft.agent.loop.rundir import RunDir
from kernelcraft.agent.loop.runloop import small_proposer
from kernelcraft.agent.loop.session import open_session
from kernelcraft.base import knobs
from kernelcraft.base.config import Settings
from kernelcraft.base.errors import LLMError, UsageError
from kernelcraft.cli import main
from kernelcraft.engine.host.evaluator import Evaluator
from kernelcraft.schema.tree import ContextKernel, NextStep
from kernelcraft.server import app
from kernelcraft.server.state import default_evaluator_factory

ROOT = Path(__file__).resolve().parents[3]
TASK = ROOT / "examples" / "elementwise" / "task.py"
SEED = (ROOT / "examples" / "elementwise" / "seed.py").read_text()
BROKEN = SEED.replace("g * 0.5 + x", "g * 0.25 + x")
UNKNOWN_API = SEED.replace("tl.erf(", "tl.erff(")
GOOD_EDIT = {"edits": [{"old": "BLOCK_SIZE=1024)", "new": "BLOCK_SIZE=512)"}]}
BAD_EDIT = {"edits": [{"old": "BLOCK_SIZE = 4096", "new": "BLOCK_SIZE = 2048"}]}


@pytest.fixture(scope="module")
async def warm_evaluator(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Evaluator]:
    """The evaluator an in-process server makes (`default_evaluator_factory`), made once for the
    module: its workers, compile pool and kept references start once, not once per run."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("KERNELCRAFT_HOME", str(tmp_path_factory.mktemp("evaluator-home")))
        evaluator = default_evaluator_factory(Settings.from_knobs(knobs.settings()))
    try:
        yield evaluator
    finally:
        await evaluator.aclose()


@pytest.fixture
def bare_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh KERNELCRAFT_HOME, for a test whose runs are processes of their own."""
    monkeypatch.setenv("KERNELCRAFT_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("KERNELCRAFT_DB", raising=False)
    return tmp_path


@pytest.fixture
def home(bare_home: Path, monkeypatch: pytest.MonkeyPatch, warm_evaluator: Evaluator) -> Path:
    """A fresh KERNELCRAFT_HOME; every in-process server a run opens (`open_session`) is the real
    one, its own database and settings, with the module's warm evaluator lent to it."""
    real = app.create_server

    def lending(settings: Settings, *args: object, **kwargs: Any) -> object:
        return real(settings, lambda _settings: LentEvaluator(warm_evaluator), **kwargs)

    monkeypatch.setattr(app, "create_server", lending)
    return bare_home


def read_steps(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.anyio
async def test_optimize_with_the_offline_tuner_runs_two_steps_on_the_cpu_and_writes_the_run(
    home: Path,
) -> None:
    out = home / "run"
    opts = OptimizeOptions(
        task=TASK, steps=2, llm=LLMConfig(kind="none"), out=out, db_path=home / "kc.db", progress=False
    )
    summary = await optimize(opts)
    steps = read_steps(out)
    assert [s["step"] for s in steps] == [1, 2]
    assert all(s["mode"] == "tuner" and s["tuner"]["changed"] for s in steps)
    configs = [json.dumps(s["tuner"]["config"], sort_keys=True) for s in steps]
    assert len(set(configs)) == 2  # never the same configuration twice, nor the seed's
    assert all(s["tuner"]["config"] != {"gelu_residual_kernel.BLOCK_SIZE": 1024} for s in steps)
    # on the CPU each proposal was compiled for the target first: its shared memory is known
    assert all(s["tuner"].get("shared_fraction") is not None for s in steps)
    assert summary["steps_done"] == 2 and summary["speedup_measured"] is False
    assert "No GPU here" in summary["gpu_note"] and "compiled for sm_90a" in summary["gpu_note"]
    assert summary["best"] is not None and Path(summary["best"]["path"]).is_file()
    assert "class ModelNew" in (out / "best_kernel.py").read_text()
    assert json.loads((out / "summary.json").read_text())["tree_id"] == summary["tree_id"]
    run = json.loads((out / "run.json").read_text())
    assert run["tree_id"] == summary["tree_id"] and run["db_path"] == str((home / "kc.db").resolve())


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_second_optimize_says_on_its_first_line_what_it_warm_starts_from_and_fresh_skips_it(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    db = home / "kc.db"
    first = await optimize(
        OptimizeOptions(
            task=TASK, steps=1, llm=LLMConfig(kind="none"), out=home / "one", db_path=db, progress=False
        )
    )
    assert "warm start" not in capsys.readouterr().err  # nothing earlier to start from
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    script = Script()
    script.fallback.update(
        submit_kernel=Reply({"code": SEED}),
        submit_edits=Reply(GOOD_EDIT),
        propose_improvements=Reply({"items": ["Use BLOCK_SIZE=512."]}),
        propose_rule=Reply({"text": "You cannot scale the residual branch differently."}),
    )
    with serve(script) as base:
        llm = LLMConfig(kind="anthropic", base_url=base)
        again = OptimizeOptions(
            task=TASK, no_seed=True, steps=1, llm=llm, out=home / "two", db_path=db, progress=False
        )
        second = await optimize(again)
        lines = capsys.readouterr().err.splitlines()
        assert lines[0].startswith("warm start: the tree starts from node "), lines[:3]
        assert (
            f"the best kernel of tree {first['tree_id']} (speed not measured; the same task source)"
            in lines[0]
        )
        assert lines[0].endswith(f"in the database {db}; --fresh starts without it")
        third = await optimize(dataclasses.replace(again, out=home / "three", fresh=True))
        assert "warm start" not in capsys.readouterr().err
    with sqlite3.connect(db) as conn:
        warm = dict(conn.execute("SELECT id, warm_start IS NOT NULL FROM trees").fetchall())
    assert warm == {first["tree_id"]: 0, second["tree_id"]: 1, third["tree_id"]: 0}


@pytest.mark.slow
@pytest.mark.anyio
async def test_optimize_with_claude_retries_overload_evaluates_the_unchanged_kernel_when_no_edit_applies_and_freezes_rules(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    script = Script()
    script.add("submit_kernel", HttpError(529, "overloaded_error", "Overloaded"), Reply({"code": BROKEN}))
    script.add("submit_edits", Reply(BAD_EDIT), Reply(BAD_EDIT))
    script.fallback.update(
        submit_kernel=Reply({"code": SEED}),
        submit_edits=Reply(GOOD_EDIT),
        propose_improvements=Reply({"items": ["Use BLOCK_SIZE=512 so more programs run."]}),
        propose_rule=Reply({"text": "You cannot scale the residual branch differently from the reference."}),
    )
    out = home / "run"
    with serve(script) as base:
        llm = LLMConfig(
            kind="anthropic",
            base_url=base,
            sdk_max_retries=1,  # the SDK's own retry takes the 529
        )
        opts = OptimizeOptions(
            task=TASK,
            steps=3,
            llm=llm,
            out=out,
            db_path=home / "kc.db",
            progress=False,
            params={"edit_retries": 1},
        )
        summary = await optimize(opts)
    steps = read_steps(out)
    assert len(steps) == 3

    # the 529 overload was retried and the kernel after it was used
    kernel_calls = [s for t, s in script.served if t == "submit_kernel"]
    assert kernel_calls[:2] == ["error 529", "reply"]

    # two malformed edits in a row: the retry told the model why; then, as AdaExplore's str_replace
    # does, the kernel was evaluated unchanged (its verdict, not a failed step)
    edit_prompts = [r["messages"][0]["content"] for r in script.requests_for("submit_edits")]
    assert "could not be applied" in edit_prompts[1] and "does not apply" in edit_prompts[1]
    assert (
        "Previous kernels and their metrics" in edit_prompts[0]
        and "Version 1 (the current kernel" in edit_prompts[0]
    )
    unchanged = [s for s in steps if s.get("unchanged")]
    assert unchanged and unchanged[0]["driver_failure"] is None and unchanged[0]["outcome"] == "correct"
    assert "does not apply" in unchanged[0]["skipped_edits"][0]
    assert unchanged[0]["code_sha256"] == hashlib.sha256(SEED.encode()).hexdigest()

    # the wrong kernel was verified wrong and recorded; no rule asked for (a wrong result, and the
    # kernelcraft preset, as AdaExplore, freezes rules while exploring)
    wrong = [s for s in steps if s["failure_class"] == "numerical_mismatch"]
    assert wrong and "rule" not in wrong[0] and not script.requests_for("propose_rule")
    with sqlite3.connect(home / "kc.db") as db:
        classes = [r[0] for r in db.execute("SELECT class FROM failures")]
        rules = db.execute("SELECT count(*) FROM rules WHERE seed = 0").fetchone()[0]
    assert classes == ["numerical_mismatch"] and rules == 0
    assert summary["preset"] == "kernelcraft"

    # prompt caching on every call, tokens and dollars are counted
    assert all(r["system"][0]["cache_control"] == {"type": "ephemeral"} for r in script.requests)
    replies = sum(1 for _, s in script.served if s == "reply")
    assert summary["usage"]["calls"] == replies and summary["usage"]["cost_usd"] > 0

    # every call is in the run's transcript: the system prompt once, each prompt and its answer
    calls = [json.loads(line) for line in (out / "prompts.jsonl").read_text().splitlines()]
    assert len(calls) == replies and sum("system" in c for c in calls) == 1
    assert {c["force_tool"] for c in calls} >= {"submit_kernel", "submit_edits"}
    assert all(c["messages"][0]["role"] == "user" and c["usage"]["output_tokens"] >= 0 for c in calls)
    assert any(c["answer"] == {"code": BROKEN} for c in calls if c["force_tool"] == "submit_kernel")


@pytest.mark.slow
@pytest.mark.anyio
async def test_with_claude_the_offline_tuner_takes_its_turn_at_a_small_step_and_spends_no_tokens(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    script = Script()
    script.fallback.update(
        submit_kernel=Reply({"code": SEED}),
        submit_edits=Reply(GOOD_EDIT),
        propose_improvements=Reply({"items": ["Use BLOCK_SIZE=512 so more programs run."]}),
    )
    out = home / "run"
    with serve(script) as base:
        llm = LLMConfig(kind="anthropic", base_url=base, sdk_max_retries=0)
        opts = OptimizeOptions(
            task=TASK, steps=3, llm=llm, out=out, db_path=home / "kc.db", progress=False, compile_check=False
        )
        summary = await optimize(opts)
    steps = read_steps(out)
    # search seed 0: a small step (the LLM's), a large one, then a small one on a correct kernel
    assert [(s["kind"], s["proposer"]) for s in steps] == [
        ("small", "llm"),
        ("large", "llm"),
        ("small", "tuner"),
    ]
    llm_small, _, tuned = steps
    assert llm_small["usage"]["calls"] == 2 and llm_small["usage"]["total_tokens"] > 0  # reviser + tuner
    assert tuned["usage"]["calls"] == 0 and tuned["usage"]["total_tokens"] == 0
    assert tuned["usage_total"] == steps[1]["usage_total"]
    assert tuned["outcome"] == "correct" and tuned["tuner"]["changed"] and tuned["tuner_fallback"] is None
    assert len(script.requests) == summary["usage"]["calls"] == 3
    assert summary["steps_by_proposer"] == {"llm": 2, "tuner": 1}
    # issue 27: the time each proposer's steps take, writing and in all, in the summary
    times = summary["step_seconds"]
    assert {k: v["steps"] for k, v in times.items()} == {"llm": 2, "tuner": 1}
    for who, v in times.items():
        mine = [s for s in steps if s["proposer"] == who]
        assert v["max"] == max(s["seconds"] for s in mine) and 0 <= v["median_writing"] <= v["median"]


def test_the_small_step_proposer_alternates_only_on_correct_tunable_kernels(tmp_path: Path) -> None:
    tunable = ContextKernel(node_id=5, kind="small", outcome="correct", code=SEED)
    failing = tunable.model_copy(update={"outcome": "wrong"})
    untunable = tunable.model_copy(update={"code": "class ModelNew:\n    pass\n"})

    def proposer(mode: str, parent: ContextKernel, last: str | None) -> str:
        run = RunDir(tmp_path / f"{mode}-{last}")
        run.create()
        if last is not None:
            run.append_step({"kind": "small", "proposer": last})
            run.append_step({"kind": "large", "proposer": "llm"})
        step = NextStep.model_construct(kind="small", parent_id=5, chain=[parent])
        return small_proposer(step, mode, run.steps())  # type: ignore[arg-type]

    assert proposer("alternate", tunable, None) == "llm"  # the LLM goes first
    assert proposer("alternate", tunable, "llm") == "tuner"
    assert proposer("alternate", tunable, "tuner") == "llm"
    assert proposer("alternate", failing, "llm") == "llm"  # a failing kernel needs the LLM's fix
    assert proposer("alternate", untunable, "llm") == "llm"
    assert proposer("only", tunable, "tuner") == "tuner" and proposer("only", failing, None) == "llm"
    assert proposer("off", tunable, "llm") == "llm"


@pytest.mark.slow
@pytest.mark.anyio
async def test_optimize_with_an_openai_compatible_server_writes_a_kernel_by_function_call_and_learns_a_rule(
    home: Path,
) -> None:
    task = home / "gelu.py"  # no gelu_seed.py beside it: the first step is the root's large step
    task.write_text(TASK.read_text())
    fix = {"edits": [{"old": "tl.erff(", "new": "tl.erf("}]}
    script = Script()
    script.add("submit_kernel", Reply({"code": UNKNOWN_API}, input_tokens=300, output_tokens=900))
    script.fallback.update(
        submit_kernel=Reply({"code": SEED}),
        submit_edits=Reply(fix),
        propose_improvements=Reply({"items": ["Call tl.erf, which Triton has."]}),
        propose_rule=Reply({"text": "You cannot call tl.erff in a Triton kernel."}),
        judge_duplicate=Reply({"is_duplicate": False, "matched_index": None, "confidence": 0.9}),
    )
    out = home / "run"
    with serve(script) as base:
        llm = LLMConfig(
            kind="openai", model="qwen-coder", base_url=f"{base}/v1", api_key_env="none", sdk_max_retries=0
        )
        # rules are learnt where a tree asks for it (adapt's trees do)
        opts = OptimizeOptions(
            task=task,
            steps=2,
            llm=llm,
            out=out,
            db_path=home / "kc.db",
            progress=False,
            params={"learn_rules": True},
        )
        summary = await optimize(opts)
    steps = read_steps(out)
    assert len(steps) == 2

    # the large step: one forced function call, its kernel failed (unknown API), a rule proposed and recorded
    first = steps[0]
    assert first["kind"] == "large" and first["proposer"] == "llm" and first["driver_failure"] is None
    kernel_requests = script.requests_for("submit_kernel")
    assert kernel_requests[0]["tool_choice"] == {"type": "function", "function": {"name": "submit_kernel"}}
    assert (
        kernel_requests[0]["messages"][0]["role"] == "system" and kernel_requests[0]["model"] == "qwen-coder"
    )
    assert first["outcome"] == "not_compiled" and first["failure_class"] == "compile_unknown_api"
    assert first["usage"]["input_tokens"] >= 300 and first["rule"]["recorded"] is True
    assert first["rule"]["proposed"] == "You cannot call tl.erff in a Triton kernel."
    assert len(script.requests_for("propose_rule")) == 1
    # the run's model judged the rule against the rulebook (AdaExplore's dedup), on the run's meter
    assert len(script.requests_for("judge_duplicate")) == 1
    with sqlite3.connect(home / "kc.db") as db:
        rules = [r[0] for r in db.execute("SELECT text FROM rules")]
    assert first["rule"]["proposed"] in rules

    # the second step (whichever kind the tree chose) repaired it; a local model has no price
    assert steps[1]["outcome"] == "correct" and summary["best"] is not None
    assert summary["llm"] == "openai" and summary["model"] == "qwen-coder"
    assert summary["usage"]["calls"] == len(script.requests) and summary["usage"]["cost_usd"] is None


@pytest.mark.anyio
async def test_optimize_with_llm_none_and_no_kernel_to_tune_says_why_and_what_to_do(home: Path) -> None:
    task = home / "lonely.py"  # the gelu task: no seed beside it, and no cookbook Model takes (scale)
    task.write_text(TASK.read_text())
    with pytest.raises(NoStartingKernel) as refused:
        await optimize(OptimizeOptions(task=task, llm=LLMConfig(kind="none"), out=home / "r", progress=False))
    said = str(refused.value)
    assert re.search(
        r"no seed kernel, and the cookbook's nearest entry, \w+, takes other __init__ parameters: "
        r"\(.*\) where the task's Model takes \(scale\)\.",
        said,
    ), said
    assert "in lonely_seed.py beside it" in said and "--llm anthropic|openai" in said, said
    assert not (home / "r").exists()  # a run that could not start leaves no run directory


def test_the_command_line_says_why_a_task_cannot_start_without_the_servers_start_up_notes(
    bare_home: Path,
) -> None:
    task = bare_home / "lonely.py"
    task.write_text(TASK.read_text())
    env = {**os.environ, "KERNELCRAFT_HOME": str(bare_home / "home"), "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "kernelcraft", "optimize", str(task), "--llm", "none", "--steps", "1"]
    ran = subprocess.run(
        cmd + ["--out", str(bare_home / "r")], env=env, capture_output=True, text=True, timeout=120
    )
    assert ran.returncode == 2, ran.stderr
    assert (
        "kernelcraft: error: --llm none needs a kernel to tune and has none" in ran.stderr
        and "lonely_seed.py" in ran.stderr
    )
    # the in-process server's notes (its database, the rules imported, the manuals indexed) are an
    # operator's: `-v` shows them, a user's run does not
    assert "server ready" not in ran.stderr and "seed rules" not in ran.stderr, ran.stderr
    assert "Traceback" not in ran.stderr


@pytest.mark.slow
@pytest.mark.anyio
async def test_adapt_with_llm_none_starts_a_seedless_sum_from_the_cookbook_and_skips_a_task_it_cannot_start(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Issue 41: KernelBench's sum reduction (its format, shapes cut down) with no seed beside it.
    # The cookbook's reduce_dim entry takes the same Model and computes the same op: the tree's
    # root is that kernel, so no step starts below it, and the tuner moves the reduction's axes,
    # each step's time recorded per axis in steps.jsonl, summary.json and the report. A batch
    # (adapt, a level) goes through optimize's choice of a start: the gelu task beside it, which
    # no cookbook entry fits, is skipped with why and what to do.
    tasks = home / "tasks"
    tasks.mkdir()
    name = "47_Sum_reduction_over_a_dimension"
    (tasks / f"{name}.py").write_text((ROOT / "tests" / "fixtures" / "tasks" / f"{name}.py").read_text())
    (tasks / "gelu.py").write_text(TASK.read_text())
    report = await adapt(
        AdaptOptions(
            tasks_dir=tasks,
            steps=1,
            llm=LLMConfig(kind="none"),
            out=home / "a",
            db_path=home / "kc.db",
            progress=False,
        )
    )
    ran, skipped = report["tasks"]
    assert ran["steps"] == 1 and ran["correct"] == 1 and ran["best"] is not None, ran
    assert (
        skipped["task"] == str(tasks / "gelu.py")
        and "no seed kernel, and the cookbook's nearest entry" in (skipped["skipped"])
    )
    assert "gelu_seed.py beside it" in skipped["skipped"] and not (home / "a" / "gelu").exists()
    err = capsys.readouterr().err
    assert "seed: the cookbook's reduce_dim kernel" in err
    assert f"{tasks / 'gelu.py'}: skipped — --llm none needs a kernel to tune" in err
    assert "rules learnt: none (--llm none: no model distils a failure into a rule" in err

    r = home / "a" / name
    run = json.loads((r / "run.json").read_text())
    cookbook = (ROOT / "kernelcraft/knowledge/cookbook/entries/reduce_dim/kernel.py").read_text()
    assert run["seed_outcome"] == "correct"  # the cookbook kernel passed the task: the tree's root
    (step,) = read_steps(r)
    assert step["proposer"] == "tuner" and step["tuner"]["op_family"] == "reduction"
    assert step["tuner"]["axes"] == ["block"] and step["seconds"] > 0  # a reduction's block first
    summary = json.loads((r / "summary.json").read_text())
    assert summary["tuner_axis_seconds"]["block"]["steps"] == 1
    assert summary["tuner_axis_seconds"]["block"]["best_gain"] is None  # no GPU: nothing timed
    tree = json.loads((r / "tree.json").read_text())
    assert tree["seed_code"] == cookbook
    page = (r / "report.html").read_text()
    assert "The offline tuner&#x27;s axes" in page and "tuner: block" in page


@pytest.mark.gpu
@pytest.mark.anyio
async def test_on_a_gpu_the_tuner_times_each_step_against_the_kernel_it_started_from(home: Path) -> None:
    # The CPU test above cannot time: on a GPU each tuner step records its base kernel's time, and
    # the summary each axis's best gain; no step of the tree starts below the cookbook's kernel.
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    task = home / "47_Sum_reduction_over_a_dimension.py"
    task.write_text((ROOT / "tests" / "fixtures" / "tasks" / task.name).read_text())
    summary = await optimize(
        OptimizeOptions(task=task, steps=4, llm=LLMConfig(kind="none"), out=home / "r", db_path=home / "kc.db",
                        progress=False)
    )  # fmt: skip
    assert summary["speedup_measured"] is True
    steps = read_steps(home / "r")
    small = [s for s in steps if s["kind"] == "small" and s.get("tuner")]
    assert small and all(s["tuner"]["base_us"] for s in small)
    gains = [v["best_gain"] for v in summary["tuner_axis_seconds"].values()]
    assert any(g is not None and g > 0 for g in gains)
    tree = json.loads((home / "r" / "tree.json").read_text())
    seed = next(n for n in tree["nodes"] if n["seed"])
    assert summary["best"]["speedup"] >= seed["speedup"]


@pytest.mark.anyio
async def test_optimize_without_an_api_key_fails_before_starting_anything(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.chdir(home)  # no .env here
    with pytest.raises(LLMError, match="ANTHROPIC_API_KEY"):
        await optimize(OptimizeOptions(task=TASK, out=home / "r", progress=False))
    assert not (home / "r").exists()


@pytest.mark.slow
@pytest.mark.anyio
async def test_optimize_resumes_the_same_tree_after_sigkill(home: Path) -> None:
    # The killed run is a process of its own (the command line); the rerun that resumes it reads
    # only the run directory and the database, so it runs here, on the module's warm evaluator.
    out = home / "run"
    env = {**os.environ, "KERNELCRAFT_HOME": str(home / "home"), "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "kernelcraft", "optimize", str(TASK), "--llm", "none", "--steps", "2"]
    cmd += ["--out", str(out), "--db", str(home / "kc.db"), "--no-compile-check", "--search-seed", "1"]
    first = subprocess.Popen(
        cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    )
    deadline = time.monotonic() + 120
    try:
        while not ((out / "steps.jsonl").is_file() and (out / "steps.jsonl").read_text().strip()):
            assert first.poll() is None, f"the run ended before it could be killed: {first.stderr.read()!r}"  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "no step was recorded within 120 s"
            await anyio.sleep(0.1)
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
    tree_id = json.loads((out / "run.json").read_text())["tree_id"]
    assert not (out / "summary.json").exists()

    again = OptimizeOptions(
        task=TASK,
        steps=2,
        llm=LLMConfig(kind="none"),
        out=out,
        db_path=home / "kc.db",
        compile_check=False,
        search_seed=1,
        progress=False,
    )
    with anyio.fail_after(180):
        summary = await optimize(again)
    assert summary["tree_id"] == tree_id
    assert "budget is spent" in summary["stopped_because"]
    nodes = [s["node_id"] for s in read_steps(out)]
    assert len(nodes) == len(set(nodes)) >= 2  # the first run's step plus the rest, none twice


@pytest.mark.slow
@pytest.mark.anyio
async def test_optimize_against_a_teams_http_server_keeps_the_tree_there_and_needs_the_token(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--server URL --token-env VAR`: the driver is an MCP client of a `kernelcraft serve --transport
    http` process; the tree and its nodes live in that server's database, not the driver's."""
    port, token = free_port(), "team-token-0123456789"
    server_db = home / "server" / "kc.db"
    server_db.parent.mkdir()
    server_log = home / "server" / "serve.log"
    base = {**os.environ, "PYTHONPATH": str(ROOT)}
    with open(server_log, "wb") as log:
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kernelcraft",
                "serve",
                "--transport",
                "http",
                "--port",
                str(port),
                "--allow-partial-box",
            ]
            + ["--db", str(server_db)],
            env={**base, "KERNELCRAFT_TOKENS": f"{token}=alice", "KERNELCRAFT_HOME": str(home / "server")},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        try:
            await wait_healthy(f"http://127.0.0.1:{port}", server=server)
        except Exception as e:
            raise AssertionError(f"{e}; its log: {server_log.read_text()[-2000:]}") from e
        cmd = [sys.executable, "-m", "kernelcraft", "optimize", str(TASK), "--llm", "none", "--steps", "1"]
        cmd += [
            "--out",
            str(home / "run"),
            "--server",
            f"http://127.0.0.1:{port}/mcp",
            "--token-env",
            "KC_TOKEN",
        ]
        client_env = {**base, "KERNELCRAFT_HOME": str(home / "client")}
        no_token = subprocess.run(cmd, env=client_env, capture_output=True, text=True, timeout=120)
        assert no_token.returncode == 2 and "export KC_TOKEN=" in no_token.stderr
        wrong = subprocess.run(
            cmd,
            env={**client_env, "KC_TOKEN": "not-a-team-token"},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert wrong.returncode == 2 and "refused the token in $KC_TOKEN (HTTP 401)" in wrong.stderr
        assert "Traceback" not in wrong.stderr and "HTTP Request" not in wrong.stderr, wrong.stderr

        async def connect(url: str, token_env: str | None) -> None:
            async with open_session(server_url=url, token_env=token_env, db_path=None):
                pass

        with pytest.raises(UsageError, match="needs a bearer token .* --token-env"):
            await connect(f"http://127.0.0.1:{port}/mcp", None)
        monkeypatch.setenv("KC_TOKEN", token)
        with pytest.raises(UsageError, match="no MCP endpoint .* ends in /mcp"):
            await connect(f"http://127.0.0.1:{port}/", "KC_TOKEN")
        with pytest.raises(UsageError, match="could not reach .* is running there"):
            await connect(f"http://127.0.0.1:{free_port()}/mcp", None)
        ran = subprocess.run(
            cmd + ["--json", "-q", "--no-compile-check"],
            env={**client_env, "KC_TOKEN": token},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert ran.returncode == 0, ran.stderr
        summary = json.loads(ran.stdout)
        assert summary["steps_done"] == 1 and f"127.0.0.1:{port}" in summary["server"]
        with sqlite3.connect(server_db) as conn:
            nodes = conn.execute(
                "SELECT COUNT(*) FROM nodes WHERE tree_id = ?", (summary["tree_id"],)
            ).fetchone()[0]
        assert nodes >= 2  # the seed and the step, written by the server
        assert not (home / "client" / "kernelcraft.db").exists()
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


@pytest.mark.slow
@pytest.mark.anyio
async def test_parallel_lanes_of_one_run_evaluate_the_whole_budget_and_say_it_is_spent(home: Path) -> None:
    # Issue 27: with --parallel, a lane that found the rest of the budget held by its sibling lanes'
    # open steps ended early, and its "held by open steps" note became the run's stop reason.
    out = home / "run"
    opts = OptimizeOptions(
        task=TASK,
        steps=4,
        parallel=3,
        llm=LLMConfig(kind="none"),
        out=out,
        db_path=home / "kc.db",
        progress=False,
    )
    summary = await optimize(opts)
    assert summary["steps_done"] == 4, summary
    assert "budget is spent" in summary["stopped_because"], summary["stopped_because"]
    assert "held by" not in summary["stopped_because"]
    # The reader is at the command line: the in-process server names commands, not MCP tools.
    assert "`kernelcraft tree status" in summary["stopped_because"], summary["stopped_because"]
    assert "search_tree_step" not in summary["stopped_because"]


@pytest.mark.slow
@pytest.mark.anyio
async def test_optimize_stops_when_stalled_and_says_so(home: Path) -> None:
    """Issue 29, item 3: KernelEvolve's stall stop. On the CPU no step is measured faster, so a run
    with --stall 2 stops after two steps of its budget of five, and says why."""
    out = home / "run"
    opts = OptimizeOptions(
        task=TASK,
        steps=5,
        llm=LLMConfig(kind="none"),
        out=out,
        db_path=home / "kc.db",
        progress=False,
        stall=2,
    )
    summary = await optimize(opts)
    assert summary["steps_done"] == 2 and len(read_steps(out)) == 2
    assert summary["stopped_because"] == "stalled: 2 steps in a row without a new best (--stall 2)"


def test_the_search_stops_name_their_limit_and_wait_for_enough_steps() -> None:
    from types import SimpleNamespace

    from kernelcraft.agent.loop.runloop import Explorer

    def stop(records: list[dict], roofline: float | None, **opts: object) -> str | None:
        run = SimpleNamespace(opts=SimpleNamespace(**{"stall": None, "roofline_stop": None, **opts}))
        run.records, run.best_roofline = records, roofline
        return Explorer._search_stop(run)  # type: ignore[arg-type]

    flat = [{"new_best": False}] * 3
    assert stop(flat, None) is None  # neither asked for
    assert stop(flat, None, stall=4) is None  # not yet four steps
    assert stop([{"new_best": True}] + flat[:2], None, stall=3) is None
    assert stop(flat, None, stall=3) == "stalled: 3 steps in a row without a new best (--stall 3)"
    assert stop([], 0.79, roofline_stop=0.8) is None
    assert (
        stop([], 0.85, roofline_stop=0.8)
        == "the best kernel runs at 85% of the roofline (--roofline-stop 0.8)"
    )


@pytest.mark.parametrize(
    ("flag", "value", "says"),
    [("--stall", "0", "--stall must be at least 1"), ("--roofline-stop", "1.5", "fraction of the roofline")],
)
def test_optimize_refuses_a_stop_it_cannot_meet(
    bare_home: Path, flag: str, value: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as refused:
        main(["optimize", str(TASK), "--llm", "none", "--out", str(bare_home / "r"), flag, value])
    err = capsys.readouterr().err
    assert refused.value.code == 2 and says in err, err
    assert not (bare_home / "r").exists()  # refused before anything started
