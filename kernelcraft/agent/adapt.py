"""Adapt: `kernelcraft adapt TASKS_DIR` — short explores over many tasks to grow the rulebook.

Every compile or runtime failure of every task is distilled into a "You cannot …" rule and recorded
(see `explore.py`; adapt's trees learn rules, whatever the preset); the rulebook deduplicates and
counts them, and a rule seen often enough becomes active and goes into every later prompt. At the
end this prints the rules whose counts grew. Steps per task: `--steps`, else the preset's
`adapt_steps` (25, as AdaExplore).

Tasks: every `*.py` in TASKS_DIR that defines `Model` and `get_inputs` (KernelBench problem files
work unchanged), and every `TASKS_DIR/<name>/task.py`. Seeds follow `optimize`'s convention:
`<name>_seed.py` beside `<name>.py`, or `seed.py` beside `task.py`. A task without a seed needs an
LLM to write its first kernel; with `--llm none` it is skipped, and the report says so.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from kernelcraft.agent.explore import OptimizeOptions, find_seed, optimize
from kernelcraft.agent.llm import LLMConfig, load_dotenv
from kernelcraft.agent.session import open_session
from kernelcraft.base.errors import LLMError, UsageError
from kernelcraft.base.presets import DEFAULT_PRESET, PresetName, preset_config

_TASK_MARKERS = (re.compile(r"^class Model\b", re.M), re.compile(r"^def get_inputs\b", re.M))


@dataclass
class AdaptOptions:
    tasks_dir: Path
    steps: int | None = None  # None: the preset's adapt_steps
    preset: PresetName = DEFAULT_PRESET
    level: int = 0  # the tasks' KernelBench level (picks the preset's c_exp); 0: none
    llm: LLMConfig = field(default_factory=LLMConfig)
    out: Path | None = None
    target: str = "sm_90a"
    server_url: str | None = None
    token_env: str | None = None
    db_path: Path | None = None
    max_total_tokens: int | None = None
    max_dollars: float | None = None
    progress: bool = True
    evaluator: Literal["local", "ray"] = "local"
    ray_address: str | None = None


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


async def _rule_counts(opts: AdaptOptions) -> dict[str, dict[str, Any]]:
    async with open_session(server_url=opts.server_url, token_env=opts.token_env, db_path=opts.db_path) as s:
        return {r["uid"]: r for r in await s.rules("", None, 50)}


async def adapt(opts: AdaptOptions) -> dict[str, Any]:
    load_dotenv()
    tasks = discover_tasks(opts.tasks_dir)
    out = opts.out or Path("kernelcraft-adapt")
    before = await _rule_counts(opts)
    steps = opts.steps if opts.steps is not None else preset_config(opts.preset).adapt_steps
    results: list[dict[str, Any]] = []
    tokens_left, dollars_left = opts.max_total_tokens, opts.max_dollars
    for task in tasks:
        name = _name(task)
        seed = find_seed(task)
        if seed is None and opts.llm.kind == "none":
            results.append(
                {
                    "task": str(task),
                    "skipped": f"no seed kernel: with --llm none put {name}_seed.py beside it "
                    "(or seed.py beside task.py), or use an LLM to write the first kernel",
                }
            )
            continue
        run_opts = OptimizeOptions(
            task=task,
            seed=seed,
            steps=steps,
            preset=opts.preset,
            level=opts.level,
            # Adapt is where rules are learnt (AdaExplore's memory_update), in every preset.
            params={"learn_rules": True},
            llm=opts.llm,
            out=out / name,
            target=opts.target,
            server_url=opts.server_url,
            token_env=opts.token_env,
            db_path=opts.db_path,
            evaluator=opts.evaluator,
            ray_address=opts.ray_address,
            max_total_tokens=tokens_left,
            max_dollars=dollars_left,
            progress=opts.progress,
            # Adapt grows the rulebook from the model's failures; tuner steps would teach it nothing.
            tuner_steps="off",
        )
        try:
            summary = await optimize(run_opts)
        except UsageError as e:
            results.append({"task": str(task), "skipped": str(e)})
            continue
        except LLMError as e:
            results.append({"task": str(task), "error": str(e)})
            break
        usage = summary["usage"]
        if tokens_left is not None:
            tokens_left = max(tokens_left - usage["total_tokens"], 0)
        if dollars_left is not None and usage["cost_usd"] is not None:
            dollars_left = max(dollars_left - usage["cost_usd"], 0.0)
        results.append(
            {
                "task": str(task),
                "tree_id": summary["tree_id"],
                "steps": summary["steps_done"],
                "correct": summary["correct"],
                "failures_by_class": summary["failures_by_class"],
                "best": summary["best"],
            }
        )
    after = await _rule_counts(opts)
    learnt = []
    for uid, rule in after.items():
        gained = rule["count"] - (before[uid]["count"] if uid in before else 0)
        if gained > 0:
            learnt.append(
                {"text": rule["text"], "count": rule["count"], "gained": gained, "status": rule["status"]}
            )
    learnt.sort(key=lambda r: (-r["gained"], -r["count"]))
    report = {"tasks": results, "rules_learnt": learnt}
    _print_report(report)
    return report


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
    if not report["rules_learnt"]:
        w("rules learnt: none (no failure produced a new or repeated rule)\n")
        return
    w("rules learnt (count, +gained this run, status):\n")
    for r in report["rules_learnt"]:
        w(f"  [{r['count']:>3}, +{r['gained']}, {r['status']}] {r['text']}\n")
