"""Adapt: `kernelcraft adapt TASKS_DIR` — short explores over many tasks to grow the rulebook.

Every compile or runtime failure of every task is distilled into a "You cannot …" rule and recorded
(see `explore.py`; adapt's trees learn rules, whatever the preset); the rulebook deduplicates and
counts them, and a rule seen often enough becomes active and goes into every later prompt. At the
end this prints the rules whose counts grew. Steps per task: `--steps`, else the preset's
`adapt_steps` (25, as AdaExplore).

Tasks: every `*.py` in TASKS_DIR that defines `Model` and `get_inputs` (KernelBench problem files
work unchanged), and every `TASKS_DIR/<name>/task.py`. Each task is one `optimize` run, which
picks what it starts from (`explore.starting_kernel`, the one home of that choice): the seed kernel
by `optimize`'s convention (`<name>_seed.py` beside `<name>.py`, or `seed.py` beside `task.py`), or
an LLM's first kernel; with `--llm none`, the cookbook's kernel when its Model fits the task's. A
task with none of these is skipped, and the report says why and what to do.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from kernelcraft.agent.llm.config import LLMConfig, load_dotenv
from kernelcraft.agent.llm.core import Usage
from kernelcraft.agent.loop.explore import optimize
from kernelcraft.agent.loop.options import OptimizeOptions
from kernelcraft.agent.loop.session import ToolSession, open_session
from kernelcraft.base.errors import LLMError, UsageError
from kernelcraft.base.knobs import Knobs
from kernelcraft.base.targets import DEFAULT_TARGET
from kernelcraft.schema.presets import ADAPT_PARAMS, DEFAULT_PRESET, PresetName, preset_config

_TASK_MARKERS = (re.compile(r"^class Model\b", re.M), re.compile(r"^def get_inputs\b", re.M))


@dataclass
class AdaptOptions:
    tasks_dir: Path
    steps: int | None = None  # None: the preset's adapt_steps
    preset: PresetName = DEFAULT_PRESET
    level: int = 0  # the tasks' KernelBench level (picks the preset's c_exp); 0: none
    llm: LLMConfig = field(default_factory=LLMConfig)
    out: Path | None = None
    target: str = DEFAULT_TARGET
    server_url: str | None = None
    token_env: str | None = None
    db_path: Path | None = None
    max_total_tokens: int | None = None
    max_dollars: float | None = None
    progress: bool = True
    evaluator: Literal["local", "ray"] = "local"
    ray_address: str | None = None
    tasks: list[Path] | None = None  # these tasks rather than tasks_dir's (a level's --problems)
    knobs: Knobs | None = None  # the settings the caller read once (the CLI's); None: `session.driver_knobs`


def discover_tasks(folder: Path) -> list[Path]:
    if not folder.is_dir():
        raise UsageError(f"{folder} is not a folder; give a folder of task files (KernelBench format)")
    tasks = sorted(p for p in folder.glob("*/task.py"))
    for p in sorted(folder.glob("*.py")):
        if p.name == "seed.py" or p.stem.endswith("_seed"):
            continue
        text = p.read_text(encoding="utf-8", errors="replace")
        if all(m.search(text) for m in _TASK_MARKERS):
            tasks.append(p)
    if not tasks:
        raise UsageError(
            f"no tasks in {folder}: expected *.py files defining class Model and get_inputs(), "
            "or <name>/task.py folders"
        )
    return tasks


def _name(task: Path) -> str:
    return task.parent.name if task.name == "task.py" else task.stem


RuleCounts = dict[str, int]
"""An active rule's uid → its count."""


async def rule_counts(opts: AdaptOptions, session: ToolSession | None = None) -> RuleCounts:
    """Every active rule's count (rules://active), over `session` or a session of its own."""
    if session is not None:
        return {r.uid: r.count for r in await session.active_rules()}
    async with open_session(
        server_url=opts.server_url, token_env=opts.token_env, db_path=opts.db_path, knobs=opts.knobs
    ) as s:
        return {r.uid: r.count for r in await s.active_rules()}


async def adapt(
    opts: AdaptOptions,
    session: ToolSession | None = None,
    rules_before: RuleCounts | None = None,
    *,
    print_report: bool = True,
) -> dict[str, Any]:
    """Run adapt's short explores; the report (also printed to stderr unless `print_report` is
    False). `session`: one already open for every task (a level's run); without one, each task
    opens its own. `rules_before`: the counts to measure the rules learnt against (a resumed
    phase's first start); default: now."""
    load_dotenv()
    tasks = opts.tasks if opts.tasks is not None else discover_tasks(opts.tasks_dir)
    out = opts.out or Path("kernelcraft-adapt")
    before = rules_before if rules_before is not None else await rule_counts(opts, session)
    steps = opts.steps if opts.steps is not None else preset_config(opts.preset).adapt_steps
    results: list[dict[str, Any]] = []
    usage = Usage()
    tokens_left, dollars_left = opts.max_total_tokens, opts.max_dollars
    for task in tasks:
        name = _name(task)
        run_opts = OptimizeOptions(
            task=task,
            seed=None,  # optimize picks it (`explore.starting_kernel`), as for a level's tasks
            steps=steps,
            preset=opts.preset,
            level=opts.level,
            # Adapt is where rules are learnt (AdaExplore's memory_update), in every preset; under
            # adaexplore with AdaExplore's adapt constants (presets.ADAPT_PARAMS).
            params={**ADAPT_PARAMS[opts.preset], "learn_rules": True},
            llm=opts.llm,
            out=out / name,
            target=opts.target,
            server_url=opts.server_url,
            token_env=opts.token_env,
            db_path=opts.db_path,
            evaluator=opts.evaluator,
            ray_address=opts.ray_address,
            knobs=opts.knobs,
            max_total_tokens=tokens_left,
            max_dollars=dollars_left,
            progress=opts.progress,
            # Adapt grows the rulebook from the model's failures; tuner steps would teach it nothing.
            tuner_steps="off",
        )
        try:
            summary = await optimize(run_opts, session)
        except UsageError as e:  # it could not start: no kernel to tune, a task that does not load
            results.append({"task": str(task), "skipped": str(e)})
            continue
        except LLMError as e:
            results.append({"task": str(task), "error": str(e)})
            break
        task_usage = summary["usage"]
        usage.add(Usage.from_dict(task_usage))
        if tokens_left is not None:
            tokens_left = max(tokens_left - task_usage["total_tokens"], 0)
        if dollars_left is not None and task_usage["cost_usd"] is not None:
            dollars_left = max(dollars_left - task_usage["cost_usd"], 0.0)
        results.append(
            {
                "task": str(task),
                "tree_id": summary["tree_id"],
                "steps": summary["steps_done"],
                "correct": summary["correct"],
                "failures_by_class": summary["failures_by_class"],
                "best": summary["best"],
                "stopped_because": summary.get("stopped_because"),
                "usage": task_usage,
            }
        )
    report = {
        "llm": opts.llm.kind,
        "tasks": results,
        "rules_learnt": await rules_learnt(opts, session, before),
        "usage": usage.to_dict(),
    }
    if print_report:
        _print_report(report)
    return report


async def rules_learnt(
    opts: AdaptOptions, session: ToolSession | None, before: RuleCounts
) -> list[dict[str, Any]]:
    """The active rules whose counts grew since `before`, most grown first."""
    if session is not None:
        after = await session.active_rules()
    else:
        async with open_session(
            server_url=opts.server_url, token_env=opts.token_env, db_path=opts.db_path, knobs=opts.knobs
        ) as s:
            after = await s.active_rules()
    grown = sorted(
        (r for r in after if r.count > before.get(r.uid, 0)),
        key=lambda r: (before.get(r.uid, 0) - r.count, -r.count),
    )
    return [
        {"text": r.text, "count": r.count, "gained": r.count - before.get(r.uid, 0), "status": r.status}
        for r in grown
    ]


def _print_report(report: dict[str, Any]) -> None:
    w = sys.stderr.write
    w(f"\nadapt: {len(report['tasks'])} task(s)\n")
    for t in report["tasks"]:
        if "skipped" in t:
            w(f"  {t['task']}: skipped — {t['skipped']}\n")
        elif "error" in t:
            w(f"  {t['task']}: stopped — {t['error']}\n")
        else:
            fails = ", ".join(f"{k} {v}" for k, v in t["failures_by_class"].items()) or "none"
            w(
                f"  {t['task']}: tree {t['tree_id']}, {t['steps']} steps, {t['correct']} correct; failures: {fails}\n"
            )
    u = report["usage"]
    dollars = "unknown (unpriced model)" if u["cost_usd"] is None else f"${u['cost_usd']:.2f}"
    w(f"tokens {u['total_tokens']:,} in {u['calls']} calls, {dollars}\n")
    if not report["rules_learnt"]:
        why = (
            "--llm none: no model distils a failure into a rule; the failures are recorded"
            if report.get("llm") == "none"
            else "no failure produced a new or repeated rule"
        )
        w(f"rules learnt: none ({why})\n")
        return
    w("rules learnt (count, +gained this run, status):\n")
    for r in report["rules_learnt"]:
        w(f"  [{r['count']:>3}, +{r['gained']}, {r['status']}] {r['text']}\n")
