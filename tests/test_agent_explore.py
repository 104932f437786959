"""The explore loop end to end on the CPU: the in-process server, the real evaluator (Triton's
interpreter), the tuner, and Claude played by a local server speaking the Messages API."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from agent_fakes import HttpError, Reply, Script, serve

from kernelcraft.agent.adapt import AdaptOptions, adapt
from kernelcraft.agent.explore import OptimizeOptions, optimize
from kernelcraft.agent.llm import LLMConfig, RetryPolicy
from kernelcraft.errors import LLMError, UsageError

ROOT = Path(__file__).resolve().parents[1]
TASK = ROOT / "examples" / "elementwise" / "task.py"
SEED = (ROOT / "examples" / "elementwise" / "seed.py").read_text()
BROKEN = SEED.replace("g * 0.5 + x", "g * 0.25 + x")
GOOD_EDIT = {"edits": [{"old": "BLOCK_SIZE=1024)", "new": "BLOCK_SIZE=512)"}]}
BAD_EDIT = {"edits": [{"old": "BLOCK_SIZE = 4096", "new": "BLOCK_SIZE = 2048"}]}


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("KERNELCRAFT_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("KERNELCRAFT_DB", raising=False)
    return tmp_path


def read_steps(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_optimize_with_the_offline_tuner_runs_three_steps_on_the_cpu_and_writes_the_run(home: Path) -> None:
    out = home / "run"
    opts = OptimizeOptions(
        task=TASK, steps=3, llm=LLMConfig(kind="none"), out=out, db_path=home / "kc.db", progress=False
    )
    summary = asyncio.run(optimize(opts))
    steps = read_steps(out)
    assert [s["step"] for s in steps] == [1, 2, 3]
    assert all(s["mode"] == "tuner" and s["tuner"]["changed"] for s in steps)
    configs = [json.dumps(s["tuner"]["config"], sort_keys=True) for s in steps]
    assert len(set(configs)) == 3  # never the same configuration twice, nor the seed's
    assert all(s["tuner"]["config"] != {"gelu_residual_kernel.BLOCK_SIZE": 1024} for s in steps)
    # on the CPU each proposal was compiled for the target first: its shared memory is known
    assert all(s["tuner"].get("shared_fraction") is not None for s in steps)
    assert summary["steps_done"] == 3 and summary["speedup_measured"] is False
    assert "No GPU here" in summary["gpu_note"] and "compiled for sm_90a" in summary["gpu_note"]
    assert summary["best"] is not None and Path(summary["best"]["path"]).is_file()
    assert "class ModelNew" in (out / "best_kernel.py").read_text()
    assert json.loads((out / "summary.json").read_text())["tree_id"] == summary["tree_id"]
    run = json.loads((out / "run.json").read_text())
    assert run["tree_id"] == summary["tree_id"] and run["db_path"] == str((home / "kc.db").resolve())


@pytest.mark.slow
def test_optimize_with_claude_retries_overload_fails_malformed_edits_and_learns_a_rule_from_a_wrong_kernel(
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
            sdk_max_retries=0,
            retry=RetryPolicy(attempts=3, base_delay=0.01, seed=0),
        )
        opts = OptimizeOptions(task=TASK, steps=3, llm=llm, out=out, db_path=home / "kc.db", progress=False)
        summary = asyncio.run(optimize(opts))
    steps = read_steps(out)
    assert len(steps) == 3

    # the 529 overload was retried and the kernel after it was used
    kernel_calls = [s for t, s in script.served if t == "submit_kernel"]
    assert kernel_calls[:2] == ["error 529", "reply"]

    # two malformed edits in a row: the retry told the model why; then the step failed with the reason
    edit_prompts = [r["messages"][0]["content"] for r in script.requests_for("submit_edits")]
    assert "could not be applied" in edit_prompts[1] and "does not apply" in edit_prompts[1]
    failed = [s for s in steps if s["driver_failure"]]
    assert failed and "edits did not apply" in failed[0]["driver_failure"]
    assert failed[0]["outcome"] != "correct" and "the driver step failed" in failed[0]["error"]

    # the wrong kernel was verified as wrong, a rule was proposed and recorded in the rulebook
    wrong = [s for s in steps if s["failure_class"] == "numerical_mismatch"]
    assert wrong and wrong[0]["rule"]["recorded"] is True
    assert wrong[0]["rule"]["proposed"].startswith("You cannot scale the residual branch")

    # prompt caching on every call, the rules go with it, tokens and dollars are counted
    assert all(r["system"][0]["cache_control"] == {"type": "ephemeral"} for r in script.requests)
    replies = sum(1 for _, s in script.served if s == "reply")
    assert summary["usage"]["calls"] == replies and summary["usage"]["cost_usd"] > 0


def test_optimize_with_llm_none_and_no_seed_says_a_seed_is_needed(home: Path) -> None:
    task = home / "lonely.py"
    task.write_text(TASK.read_text())
    with pytest.raises(UsageError, match=r"--llm none needs a seed kernel.*lonely_seed\.py"):
        asyncio.run(
            optimize(OptimizeOptions(task=task, llm=LLMConfig(kind="none"), out=home / "r", progress=False))
        )


def test_optimize_without_an_api_key_fails_before_starting_anything(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.chdir(home)  # no .env here
    with pytest.raises(LLMError, match="ANTHROPIC_API_KEY"):
        asyncio.run(optimize(OptimizeOptions(task=TASK, out=home / "r", progress=False)))
    assert not (home / "r").exists()


def test_adapt_with_llm_none_skips_tasks_without_seeds_and_says_why(home: Path) -> None:
    tasks = home / "tasks"
    tasks.mkdir()
    (tasks / "gelu.py").write_text(TASK.read_text())
    report = asyncio.run(
        adapt(
            AdaptOptions(
                tasks_dir=tasks,
                steps=1,
                llm=LLMConfig(kind="none"),
                out=home / "a",
                db_path=home / "kc.db",
                progress=False,
            )
        )
    )
    assert (
        report["tasks"][0]["skipped"].startswith("no seed kernel")
        and "gelu_seed.py" in report["tasks"][0]["skipped"]
    )


@pytest.mark.slow
def test_optimize_resumes_the_same_tree_after_sigkill(home: Path) -> None:
    out = home / "run"
    env = {**os.environ, "KERNELCRAFT_HOME": str(home / "home"), "PYTHONPATH": str(ROOT)}
    cmd = [
        sys.executable,
        "-m",
        "kernelcraft",
        "optimize",
        str(TASK),
        "--llm",
        "none",
        "--steps",
        "2",
        "--out",
        str(out),
        "--db",
        str(home / "kc.db"),
        "--no-compile-check",
        "--search-seed",
        "1",
    ]
    first = subprocess.Popen(
        cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    )
    deadline = time.monotonic() + 120
    try:
        while not ((out / "steps.jsonl").is_file() and (out / "steps.jsonl").read_text().strip()):
            assert first.poll() is None, f"the run ended before it could be killed: {first.stderr.read()!r}"  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "no step was recorded within 120 s"
            time.sleep(0.1)
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
    tree_id = json.loads((out / "run.json").read_text())["tree_id"]
    assert not (out / "summary.json").exists()

    second = subprocess.run(cmd + ["--json", "-q"], env=env, capture_output=True, text=True, timeout=180)
    assert second.returncode == 0, second.stderr
    summary = json.loads(second.stdout)
    assert summary["tree_id"] == tree_id
    assert "budget is spent" in summary["stopped_because"]
    nodes = [s["node_id"] for s in read_steps(out)]
    assert len(nodes) == len(set(nodes)) >= 2  # the first run's step plus the rest, none twice
