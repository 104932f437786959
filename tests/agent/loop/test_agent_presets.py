"""The driver under the search's presets: edits as AdaExplore applies them, the failures it learns
from, what a small step's prompts show, adapt's steps per task, and `--preset adaexplore` end to end."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from agent_fakes import Reply, Script, serve

import kernelcraft.agent.batch.adapt as adapt_module
from kernelcraft.agent.batch.adapt import AdaptOptions, adapt
from kernelcraft.agent.llm import prompts
from kernelcraft.agent.llm.config import LLMConfig
from kernelcraft.agent.loop.edits import Edit, apply_what_applies
from kernelcraft.agent.loop.explore import optimize
from kernelcraft.agent.loop.options import OptimizeOptions
from kernelcraft.agent.loop.runloop import learns_from
from kernelcraft.base.failures import FailureClass
from kernelcraft.cli import main
from kernelcraft.schema.docs import DocSection
from kernelcraft.schema.tree import ContextKernel, NextStep, NodeInfo

ROOT = Path(__file__).resolve().parents[3]
TASK = ROOT / "examples" / "elementwise" / "task.py"
SEED = (ROOT / "examples" / "elementwise" / "seed.py").read_text()


def test_edits_that_do_not_apply_are_skipped_and_the_rest_applied_as_adaexplores_str_replace() -> None:
    src = "a = 1\nb = 2\nb = 2\n"
    code, skipped = apply_what_applies(
        src, [Edit("a = 1", "a = 3"), Edit("c = 1", "c = 2"), Edit("b = 2", "b = 9")]
    )
    assert code == "a = 3\nb = 2\nb = 2\n"
    assert len(skipped) == 2 and "edit 2 does not apply" in skipped[0] and "edit 3 is ambiguous" in skipped[1]
    unchanged, why = apply_what_applies(src, [Edit("zzz", "y")])
    assert unchanged == src and len(why) == 1 and why[0].startswith("edit 1 does not apply")


def node(cls: FailureClass | None) -> NodeInfo:
    return NodeInfo(
        id=3,
        tree_id=1,
        parent_id=2,
        kind="small",
        status="evaluated",
        failure_class=cls,
        client="x",
        created_at="t",
    )


def test_a_rule_is_asked_for_after_compile_and_runtime_errors_not_after_wrong_results() -> None:
    assert learns_from(node(FailureClass.COMPILE_UNKNOWN_API))
    assert learns_from(node(FailureClass.RUNTIME_ILLEGAL_MEMORY_ACCESS))
    assert learns_from(node(FailureClass.PYTORCH_FALLBACK))
    assert not learns_from(node(FailureClass.NUMERICAL_MISMATCH))
    assert not learns_from(node(FailureClass.NAN_OR_INF))
    assert not learns_from(node(None))  # abandoned: nothing ran


def test_a_small_steps_edit_prompt_shows_each_versions_code_and_metrics_and_the_feedback() -> None:
    older = ContextKernel(
        node_id=4, kind="large", outcome="correct", speedup=1.5, candidate_us=80.0, code="OLD_CODE"
    )
    broken = ContextKernel(
        node_id=5,
        kind="small",
        outcome="not_compiled",
        failure_class=FailureClass.COMPILE_DOT,
        error="tl.dot needs K >= 16",
        code="NEW_CODE",
    )
    section = DocSection(
        id=7,
        title="Triton guide",
        heading_path="Triton guide > tl.dot",
        file="t.md",
        arch="any",
        snippet="K must be at least 16.",
    )
    step = NextStep.model_construct(
        task_name="t.py",
        target="sm_90a",
        task_source="TASK",
        start_code="NEW_CODE",
        chain=[older, broken],
        rules=[],
        speedup_measured=True,
        parent_profile="memory-bound at 40% of peak bandwidth",
        manual_sections=[section],
    )
    text = prompts.tuner(step, ["Use K = 16."])
    assert text.index("Version 1 — node 4: correct, 1.50x vs PyTorch, 80.0 us") < text.index("OLD_CODE")
    assert "Version 2 (the current kernel, the one to change) — node 5: did not compile [compile_dot]" in text
    assert text.index("OLD_CODE") < text.index("NEW_CODE") and "tl.dot needs K >= 16" in text
    assert "Profile of the current kernel: memory-bound at 40% of peak bandwidth." in text
    assert "## Triton guide > tl.dot\nK must be at least 16." in text
    assert "Profile of the current kernel" in prompts.reviser(step)


@pytest.fixture
def adapt_tasks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, list[OptimizeOptions]]:
    """A tasks folder of one task and its seed, and adapt wired to a recording fake of optimize
    (no rules learnt): the folder and the options each optimize was called with."""
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "gelu.py").write_text(TASK.read_text())
    (tasks / "gelu_seed.py").write_text(SEED)
    ran: list[OptimizeOptions] = []

    async def fake_optimize(opts: OptimizeOptions, session: object = None) -> dict[str, Any]:
        ran.append(opts)
        usage = {"total_tokens": 0, "cost_usd": None}
        return {
            "tree_id": 1,
            "steps_done": 0,
            "correct": 0,
            "failures_by_class": {},
            "best": None,
            "usage": usage,
        }

    async def no_rules(opts: AdaptOptions, session: object = None) -> dict[str, int]:
        return {}

    async def none_learnt(opts: AdaptOptions, session: object, before: dict[str, int]) -> list[Any]:
        return []

    monkeypatch.setattr(adapt_module, "optimize", fake_optimize)
    monkeypatch.setattr(adapt_module, "rule_counts", no_rules)
    monkeypatch.setattr(adapt_module, "rules_learnt", none_learnt)
    return tasks, ran


@pytest.mark.anyio
async def test_adapt_runs_the_presets_25_steps_per_task_and_its_trees_learn_rules(
    tmp_path: Path, adapt_tasks: tuple[Path, list[OptimizeOptions]]
) -> None:
    tasks, ran = adapt_tasks
    await adapt(AdaptOptions(tasks_dir=tasks, llm=LLMConfig(kind="none"), out=tmp_path / "a", progress=False))
    await adapt(
        AdaptOptions(
            tasks_dir=tasks,
            preset="adaexplore",
            llm=LLMConfig(kind="none"),
            out=tmp_path / "b",
            progress=False,
        )
    )
    await adapt(
        AdaptOptions(tasks_dir=tasks, steps=3, llm=LLMConfig(kind="none"), out=tmp_path / "c", progress=False)
    )
    assert [(o.steps, o.preset) for o in ran] == [(25, "kernelcraft"), (25, "adaexplore"), (3, "kernelcraft")]
    assert all(o.params["learn_rules"] is True and o.tuner_steps == "off" for o in ran)
    # kernelcraft adapts with its explore's constants; adaexplore with those of AdaExplore's adapt run
    # (config/SYN-v1 over agent/agent_entry.py's defaults)
    assert ran[0].params == ran[2].params == {"learn_rules": True}
    assert ran[1].params == {
        "learn_rules": True,
        "c": 0.25,
        "c_exp": 0.25,
        "reward_alpha": 1.0,
        "p_large": 0.25,
        "reviser": False,
    }


def test_kernelcraft_adapt_without_steps_takes_the_presets(
    tmp_path: Path, adapt_tasks: tuple[Path, list[OptimizeOptions]]
) -> None:
    tasks, ran = adapt_tasks
    out = str(tmp_path / "a")
    with pytest.raises(SystemExit) as done:
        main(["adapt", str(tasks), "--llm", "none", "--preset", "adaexplore", "--out", out, "-q"])
    assert done.value.code == 0 and [(o.steps, o.preset) for o in ran] == [(25, "adaexplore")]
    with pytest.raises(SystemExit) as refused:
        main(["adapt", str(tasks), "--llm", "none", "--steps", "0", "--out", out, "-q"])
    assert refused.value.code == 2 and len(ran) == 1


@pytest.mark.slow
@pytest.mark.anyio
async def test_optimize_with_the_adaexplore_preset_lets_the_llm_write_every_step_without_feedback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    monkeypatch.setenv("KERNELCRAFT_HOME", str(tmp_path / "home"))
    script = Script()
    good_edit = {"edits": [{"old": "BLOCK_SIZE=1024)", "new": "BLOCK_SIZE=512)"}]}
    script.fallback.update(
        submit_kernel=Reply({"code": SEED}),
        submit_edits=Reply(good_edit),
        propose_improvements=Reply({"items": ["Use BLOCK_SIZE=512 so more programs run."]}),
    )
    out = tmp_path / "run"
    with serve(script) as base:
        llm = LLMConfig(kind="anthropic", base_url=base, sdk_max_retries=0)
        opts = OptimizeOptions(
            task=TASK,
            steps=3,
            llm=llm,
            out=out,
            db_path=tmp_path / "kc.db",
            progress=False,
            preset="adaexplore",
        )
        summary = await optimize(opts)
    steps = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]
    # the same search seed as the kernelcraft run that hands its third step to the tuner: here the LLM's
    assert [(s["kind"], s["proposer"]) for s in steps] == [
        ("small", "llm"),
        ("large", "llm"),
        ("small", "llm"),
    ]
    assert summary["preset"] == "adaexplore" and summary["steps_by_proposer"] == {"llm": 3}
    prompts_sent = [r["messages"][0]["content"] for r in script.requests]
    assert not any("hardware manuals" in p or "Hardware-manual" in p for p in prompts_sent)
    with sqlite3.connect(tmp_path / "kc.db") as db:
        params = json.loads(
            db.execute("SELECT params FROM trees WHERE id = ?", (summary["tree_id"],)).fetchone()[0]
        )
    assert (
        params["preset"] == "adaexplore" and params["tuner_steps"] == "off" and params["learn_rules"] is False
    )
    assert json.loads((out / "run.json").read_text())["preset"] == "adaexplore"


def test_level_reaches_the_tree_and_picks_adaexplores_exploration_constant(tmp_path: Path) -> None:
    """`optimize --level 3` / `adapt --level 3` (issue 27, D9): the tree records the level, and the
    preset's c_exp for it (AdaExplore's 0.15 on level 3)."""
    from kernelcraft.agent.loop.options import OptimizeOptions
    from kernelcraft.schema.presets import config_of, preset_values

    opts = OptimizeOptions(task=tmp_path / "t.py", preset="adaexplore", level=3)
    params = opts.tree_params()
    assert params["level"] == 3
    config = config_of({**preset_values("adaexplore", 3), **params})
    assert config.c_exp == 0.15 and config.level == 3
    assert "level" not in OptimizeOptions(task=tmp_path / "t.py").tree_params()


def test_no_seed_starts_without_the_seed_beside_the_task(tmp_path: Path) -> None:
    """`optimize --no-seed` (D8): the seed step is explicit; a seed file beside the task is ignored,
    and --llm none, which can only tune a seed, is refused with the reason."""
    from kernelcraft.agent.llm.config import LLMConfig
    from kernelcraft.agent.loop.explore import read_inputs
    from kernelcraft.agent.loop.options import OptimizeOptions
    from kernelcraft.base.errors import UsageError

    task = tmp_path / "t.py"
    task.write_text((Path(__file__).parents[2] / "cheats" / "task_scale.py").read_text())
    (tmp_path / "t_seed.py").write_text((Path(__file__).parents[2] / "cheats" / "good.py").read_text())
    with pytest.raises(UsageError, match="--no-seed has nothing to start from"):
        read_inputs(OptimizeOptions(task=task, no_seed=True, llm=LLMConfig(kind="none")))
    assert read_inputs(OptimizeOptions(task=task, llm=LLMConfig(kind="none"))).seed_code is not None


@pytest.mark.anyio
async def test_a_large_step_prompt_names_the_gpu_and_gives_one_worked_example(tmp_path: Path) -> None:
    """Issue 27, D7: the GPU's name and a worked example (the cookbook kernel nearest the task), as
    AdaExplore's prompts give one; the rules once."""
    from kernelcraft.agent.loop.proposers import LLMProposer
    from kernelcraft.schema.rules import RULES_CLOSE, RuleOut, RuleScope
    from kernelcraft.schema.tree import NextStep

    task = (
        Path(__file__).resolve().parents[3] / "kernelcraft/knowledge/cookbook/entries/softmax/task.py"
    ).read_text()
    from mcp import Client

    from kernelcraft.agent.loop.session import ToolSession
    from kernelcraft.base.config import Settings
    from kernelcraft.server.app import create_server

    async with Client(create_server(Settings(db_path=tmp_path / "k.db"))) as client:
        proposer = LLMProposer.__new__(LLMProposer)
        proposer.task_source, proposer._example = task, False
        proposer.session = ToolSession(client, "a test server")
        example = await proposer.example()
    assert example is not None and "class ModelNew" in example
    rule = RuleOut(
        id=1,
        uid="r-1",
        text="You cannot call tl.float32 as a function.",
        count=3,
        status="active",
        scope=RuleScope(),
    )
    step = NextStep(
        tree_id=1,
        node_id=2,
        parent_id=1,
        kind="large",
        step_index=1,
        client="c",
        lease_expires_at="2026-12-04T00:00:00Z",
        reason="r",
        task_name="t.py",
        task_source=task,
        target="sm_90a",
        rules=[rule],
        speedup_measured=False,
        instructions="LARGE STEP",
    )
    prompt = prompts.large_step(step, example)
    assert "NVIDIA H100/H200 (Hopper, sm_90a)" in prompt and "A worked example" in prompt
    assert prompt.count(RULES_CLOSE) == 1 and prompt.count(rule.text) == 1


def test_optimize_explores_50_candidates_under_adaexplores_preset_unless_told() -> None:
    """AdaExplore explores 50 candidates a task (issue 27, D16); kernelcraft's preset keeps 10."""
    from kernelcraft.cli import build_parser
    from kernelcraft.cli.agent import optimize_steps

    parser = build_parser()
    for argv, want in (
        (["optimize", "t.py", "--preset", "adaexplore"], 50),
        (["optimize", "t.py", "--preset", "kernelcraft"], 10),
        (["optimize", "t.py", "--preset", "adaexplore", "--steps", "7"], 7),
    ):
        args = parser.parse_args(argv)
        assert optimize_steps(args.steps, args.preset) == want, argv


@pytest.mark.slow
def test_a_dry_run_prints_the_first_prompt_calls_no_model_and_leaves_nothing(tmp_path: Path) -> None:
    """`optimize --dry-run` (issue 27, item 3): no key, no model call; the tree in a throwaway
    database; the prompt on stdout. The task without its seed: the first prompt asks for a kernel
    and nothing is evaluated (a seed's verify cost this test ~10 of its 11 s)."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"} | {
        "KERNELCRAFT_HOME": str(tmp_path / "home")
    }
    task = tmp_path / "layernorm.py"
    task.write_text((Path(__file__).resolve().parents[3] / "examples" / "layernorm" / "task.py").read_text())
    done = subprocess.run(
        [sys.executable, "-m", "kernelcraft", "optimize", str(task), "--dry-run", "-q"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("# system prompt") and "# user message (the model must call" in done.stdout
    assert "no model was called" in done.stderr
    assert (
        not (tmp_path / "kernelcraft-runs").exists() and not (tmp_path / "home" / "kernelcraft.db").exists()
    )
