"""`kernelcraft optimize` and `kernelcraft adapt`: the driver agent's commands."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernelcraft.agent.llm.config import LLMConfig
from kernelcraft.base.errors import UsageError
from kernelcraft.base.targets import DEFAULT_TARGET, KNOWN_TARGETS
from kernelcraft.cli.common import (
    EXIT_NEGATIVE,
    EXIT_OK,
    Subcommands,
    add_db,
    add_evaluator,
    add_json,
    check_evaluator_args,
    emit,
    knobs_of,
    print_json,
    run,
)
from kernelcraft.cli.levelwords import render_level
from kernelcraft.schema.presets import DEFAULT_PRESET, OPTIMIZE_STEPS, PRESET_NAMES

if TYPE_CHECKING:
    from kernelcraft.agent.loop.options import OptimizeOptions
    from kernelcraft.level.tasks import LevelTask
    from kernelcraft.schema.levelrun import LevelRunSummary

# Tasks of a folder optimised at once: their LLM calls overlap, and one evaluator takes their
# candidates in turn (a GPU times one at a time).
TASKS_PARALLEL = 4

LLM_HELP = (
    "anthropic (key in $ANTHROPIC_API_KEY), openai (any OpenAI-compatible server: OpenAI, vLLM, "
    "Ollama, llama.cpp; with --base-url and --model) or none (the offline tuner only; needs a seed kernel)"
)


def _llm_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("language model")
    g.add_argument("--llm", choices=["anthropic", "openai", "none"], default="anthropic", help=LLM_HELP)
    g.add_argument("--model", help="model id (default for anthropic: claude-sonnet-5-5; required for openai)")
    g.add_argument("--base-url", help="API base URL (openai: e.g. http://localhost:11434/v1 for Ollama)")
    g.add_argument(
        "--api-key-env",
        help="environment variable holding the API key (default ANTHROPIC_API_KEY or OPENAI_API_KEY; "
        "'none' for a local server that checks no key). A ./.env file is read if present; it never "
        "overrides variables already set",
    )
    g.add_argument("--max-output-tokens", type=int, default=16_384, help="max tokens per LLM answer")
    g.add_argument("--thinking-budget", type=int, help="anthropic: extended thinking with this many tokens")
    g.add_argument("--max-tokens", type=int, help="stop the run once it has used this many tokens in all")
    g.add_argument(
        "--max-dollars", type=float, help="stop the run once it has cost this much (priced models)"
    )


def _preset_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--level",
        type=int,
        choices=(0, 1, 2, 3),
        default=0,
        help="the tasks' KernelBench level: picks the preset's exploration constant (AdaExplore's 0.15 "
        "on level 3, 0.3 otherwise); 0: not a KernelBench task",
    )
    p.add_argument(
        "--preset",
        choices=PRESET_NAMES,
        default=DEFAULT_PRESET,
        help="the search's configuration: kernelcraft (AdaExplore's search with KernelEvolve's feedback: "
        "hardware-manual sections, profiles, warm start; the offline tuner's turns) or adaexplore "
        "(AdaExplore exactly); the README lists both",
    )


def _server_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("server")
    g.add_argument("--server", metavar="URL", help="a kernelcraft server over HTTP (default: in-process)")
    g.add_argument("--token-env", metavar="VAR", help="variable holding the bearer token for --server")
    add_db(g, "database of the in-process server")
    g.add_argument("--target", choices=KNOWN_TARGETS, default=DEFAULT_TARGET, help="GPU the kernels are for")
    add_evaluator(g)


def llm_config(args: argparse.Namespace) -> LLMConfig:
    return LLMConfig(
        kind=args.llm,
        model=args.model,
        base_url=args.base_url,
        api_key_env=args.api_key_env,
        max_tokens=args.max_output_tokens,
        thinking_budget=args.thinking_budget,
    )


def _run_options(args: argparse.Namespace) -> dict[str, Any]:
    """What `optimize` and `adapt` share: budget, LLM, server, evaluator, target, output, progress."""
    check_evaluator_args(args.evaluator, args.ray_address)
    return {
        "evaluator": args.evaluator,
        "ray_address": args.ray_address,
        "steps": args.steps,
        "preset": args.preset,
        "level": args.level,
        "llm": llm_config(args),
        "out": args.out,
        "target": args.target,
        "server_url": args.server,
        "token_env": args.token_env,
        "db_path": args.db,
        "max_total_tokens": args.max_tokens,
        "max_dollars": args.max_dollars,
        "progress": not args.quiet,
        "knobs": knobs_of(args),
    }


def _check_steps(steps: int | None) -> None:
    """None: adapt's default, the preset's steps per task."""
    if steps is not None and steps < 1:
        raise UsageError(f"--steps must be at least 1, not {steps}")


def _check_llm(args: argparse.Namespace) -> None:
    """The language model's settings and key (./.env read first, never overriding the environment)."""
    from kernelcraft.agent.llm.config import check_llm, load_dotenv

    load_dotenv()
    check_llm(llm_config(args))


def preflight_optimize(args: argparse.Namespace) -> None:
    """Every check that needs no work, before any (no run directory, no server, no worker): the
    steps, the task parses and defines Model, the seed parses and defines ModelNew, the LLM's key
    is there. Each failure is one line and exit 2."""
    from kernelcraft.agent.loop.explore import find_seed
    from kernelcraft.engine import check_candidate, check_task, read_source

    _check_steps(args.steps)
    check_task(read_source(args.task), str(args.task))
    no_seed = getattr(args, "no_seed", False)
    if no_seed and args.seed is not None:
        raise UsageError("--no-seed and --seed contradict each other; give one")
    seed = None if no_seed else args.seed or find_seed(args.task)
    if seed is not None:
        check_candidate(read_source(seed), str(seed))
    if not getattr(args, "dry_run", False):  # a dry run calls no model: no key needed
        _check_llm(args)


def optimize_steps(steps: int | None, preset: str) -> int:
    """`--steps`, else the preset's budget (AdaExplore's 50 for adaexplore; issue 27, D16)."""
    return steps if steps is not None else OPTIMIZE_STEPS.get(preset, 10)  # type: ignore[call-overload]


def _find(error: BaseException, kind: type[BaseException]) -> BaseException | None:
    """`error`, or the first exception of `kind` inside an exception group, or None."""
    if isinstance(error, kind):
        return error
    for inner in getattr(error, "exceptions", ()):
        found = _find(inner, kind)
        if found is not None:
            return found
    return None


def _optimize_options(args: argparse.Namespace) -> OptimizeOptions:
    from kernelcraft.agent.loop.options import OptimizeOptions

    return OptimizeOptions(
        task=args.task,
        seed=args.seed,
        no_seed=args.no_seed,
        dry_run=args.dry_run,
        search_seed=args.search_seed,
        compile_check=not args.no_compile_check,
        tuner_steps=args.tuner_steps,
        parallel=args.parallel,
        fresh=args.fresh,
        stall=args.stall,
        roofline_stop=args.roofline_stop,
        **_run_options(args),
    )


def quiet_in_process_server(args: argparse.Namespace) -> None:
    """`optimize` and `adapt` print their own lines; the in-process server's start-up notes (its
    database, the seed rules imported, the manuals indexed, whether a model judges rules) are a
    server operator's, so they show only with -v. Its warnings and errors always show."""
    if not getattr(args, "verbose", False):
        logging.getLogger("kernelcraft.server").setLevel(logging.WARNING)


def cmd_optimize(args: argparse.Namespace) -> int:
    from kernelcraft.agent.loop.explore import optimize

    quiet_in_process_server(args)
    if args.stall is not None and args.stall < 1:
        raise UsageError(f"--stall must be at least 1 step, not {args.stall}")
    if args.roofline_stop is not None and not 0 < args.roofline_stop <= 1:
        raise UsageError(f"--roofline-stop is a fraction of the roofline in (0, 1], not {args.roofline_stop}")
    args.steps = optimize_steps(args.steps, args.preset)
    if args.task.is_dir():
        return cmd_optimize_level(args)
    if args.problems is not None or args.tasks_parallel is not None:
        raise UsageError(
            f"--problems and --tasks-parallel choose among a folder's tasks; {args.task} is one task file"
        )
    if args.adapt_steps is not None or args.adapt_tasks is not None:
        raise UsageError(
            f"--adapt-steps and --adapt-tasks set a folder's adapt phase; {args.task} is one task file "
            "(run `kernelcraft adapt` on a folder first)"
        )
    preflight_optimize(args)
    opts = _optimize_options(args)
    if args.dry_run:
        from kernelcraft.agent.llm.wrappers import DryRunStop

        try:
            run(lambda: optimize(opts))
        except BaseException as e:  # the stop may come wrapped in the session's task group
            stop = _find(e, DryRunStop)
            if stop is None:
                raise
            print(f"\n({stop})", file=sys.stderr)
        return EXIT_OK
    summary = run(lambda: optimize(opts))
    if args.json:
        print_json(summary)
    return EXIT_OK if summary["best"] is not None else EXIT_NEGATIVE


def preflight_level(args: argparse.Namespace) -> list[LevelTask]:
    """A level's checks that need no work: the folder and --problems, every task parses and
    defines Model, each seed beside a task defines ModelNew, the LLM's key is there."""
    from kernelcraft.agent.batch.levelplan import find_level_tasks
    from kernelcraft.agent.loop.explore import find_seed
    from kernelcraft.engine import check_candidate, check_task, read_source
    from kernelcraft.level.tasks import parse_problems

    _check_steps(args.steps)
    if args.seed is not None:
        raise UsageError(
            "--seed names one task's seed; in a folder each task's seed is <task>_seed.py beside it"
        )
    if args.dry_run:
        raise UsageError("--dry-run shows one task's first prompt: give a task file, not a folder")
    if args.tasks_parallel is not None and args.tasks_parallel < 1:
        raise UsageError(f"--tasks-parallel must be at least 1, not {args.tasks_parallel}")
    if args.adapt_steps is not None and args.adapt_steps < 0:
        raise UsageError(f"--adapt-steps must be 0 (no adapt phase) or more, not {args.adapt_steps}")
    if args.adapt_tasks is not None:
        from kernelcraft.agent.batch.adapt import discover_tasks

        discover_tasks(args.adapt_tasks)
    tasks = find_level_tasks(args.task, parse_problems(args.problems) if args.problems else None)
    for t in tasks:
        check_task(read_source(t.path), str(t.path))
        seed = None if args.no_seed else find_seed(t.path)
        if seed is not None:
            check_candidate(read_source(seed), str(seed))
    _check_llm(args)
    return tasks


def cmd_optimize_level(args: argparse.Namespace) -> int:
    """`optimize FOLDER`: every task of the folder (or --problems), resumable; exit 0 when every
    task's search ran to its end, whatever it found, 1 when one was skipped or stopped short."""
    from kernelcraft.agent.batch.levelplan import LevelOptions
    from kernelcraft.agent.batch.levelrun import optimize_level
    from kernelcraft.cli.level import LevelBar
    from kernelcraft.level.tasks import parse_problems

    preflight_level(args)
    opts = LevelOptions(
        tasks_dir=args.task,
        run=_optimize_options(args),
        problems=parse_problems(args.problems) if args.problems else None,
        tasks_parallel=args.tasks_parallel or TASKS_PARALLEL,
        out=args.out,
        adapt_steps=args.adapt_steps,
        adapt_tasks=args.adapt_tasks,
    )

    async def main() -> LevelRunSummary:
        if args.quiet:
            return await optimize_level(opts)
        with LevelBar() as bar:
            return await optimize_level(opts, bar)

    summary = run(main)
    emit(summary, args.json, render_level(summary))
    return EXIT_OK if summary.finished == summary.total else EXIT_NEGATIVE


def cmd_adapt(args: argparse.Namespace) -> int:
    from kernelcraft.agent.batch.adapt import AdaptOptions, adapt, discover_tasks

    quiet_in_process_server(args)
    _check_steps(args.steps)
    discover_tasks(args.tasks_dir)
    _check_llm(args)
    opts = AdaptOptions(tasks_dir=args.tasks_dir, **_run_options(args))
    report = run(lambda: adapt(opts))
    if args.json:
        print_json(report)
    return EXIT_OK


def register(sub: Subcommands) -> None:
    p = sub.add_parser(
        "optimize",
        help="optimise a task's kernel with the tree search (AdaExplore's Explore)",
        description="Run the search tree on TASK: large steps write new kernels, small steps refine one; "
        "failures are recorded in the rulebook (adapt learns rules from them). Resumable: rerun with the "
        "same --out to continue.",
    )
    p.add_argument(
        "task",
        metavar="TASK",
        type=Path,
        help="KernelBench-format task file (Model, get_inputs, get_init_inputs), or a folder of them "
        "(a KernelBench level): every task optimised, one tree each, one rulebook",
    )
    p.add_argument(
        "--problems",
        metavar="IDS",
        help="with a folder: only these problem ids, e.g. 1-10,19 (as kernelcraft level)",
    )
    p.add_argument(
        "--tasks-parallel",
        type=int,
        metavar="N",
        help=f"with a folder: tasks optimised at once over the one evaluator (default {TASKS_PARALLEL})",
    )
    p.add_argument(
        "--adapt-steps",
        type=int,
        metavar="N",
        help="with a folder: first an adapt phase (AdaExplore's Adapt: rules learnt from failures, "
        "into the same rulebook) of N steps a task (default: the preset's, 25 as AdaExplore; 0: none; "
        "none either with --llm none); a rerun skips a finished phase",
    )
    p.add_argument(
        "--adapt-tasks",
        type=Path,
        metavar="DIR",
        help="with a folder: the adapt phase's tasks (default: the level's own; AdaExplore adapts on "
        "synthetic tasks)",
    )
    p.add_argument(
        "--seed", type=Path, help="seed kernel (ModelNew); default <task>_seed.py or seed.py beside task.py"
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the prompt the first LLM step would send (the tree started in a throwaway database, "
        "the seed evaluated) and stop: no model is called, no key is needed",
    )
    p.add_argument(
        "--no-seed",
        action="store_true",
        help="start without a seed kernel (the first step writes one), even where <task>_seed.py exists",
    )
    p.add_argument(
        "--steps",
        type=int,
        default=None,
        help="candidates to evaluate: the tree's budget (default: the preset's, adaexplore 50 as "
        "AdaExplore, kernelcraft 10)",
    )
    p.add_argument(
        "--out",
        type=Path,
        help="run directory (default ./kernelcraft-runs/<task>); with a folder, one per task inside it",
    )
    p.add_argument(
        "--fresh",
        action="store_true",
        help="a new tree without a seed does not start from the best kernel of an earlier tree of the "
        "same task in the database (the kernelcraft preset's warm start, said on the first line)",
    )
    p.add_argument(
        "--stall",
        type=int,
        metavar="N",
        help="stop after N steps in a row that find no faster kernel (KernelEvolve's stall stop); "
        "default: spend the whole budget",
    )
    p.add_argument(
        "--roofline-stop",
        type=float,
        metavar="F",
        help="stop once the best kernel runs at fraction F (0-1] of the target's roofline (needs a GPU: "
        "without one no speed is measured and the run spends its budget)",
    )
    p.add_argument("--search-seed", type=int, default=0, help="seed of the tree's and the tuner's choices")
    p.add_argument(
        "--no-compile-check",
        action="store_true",
        help="tuner: skip compiling proposals before submitting (CPU)",
    )
    p.add_argument(
        "--tuner-steps",
        choices=["off", "alternate", "only"],
        default=None,
        help="with an LLM, small steps the offline tuner writes (no tokens) when the kernel to refine is "
        "correct and has tunable launch parameters: alternate (LLM and tuner take turns), "
        "only (every such step), off (never); default: the preset's (kernelcraft alternate, adaexplore off)",
    )
    _preset_arg(p)
    p.add_argument(
        "--parallel",
        type=int,
        default=1,
        metavar="K",
        help="steps in flight at once (each written and evaluated while the others are); "
        "the tree counts the ones in flight as visits, see the README",
    )
    add_json(p, "the summary as JSON")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress display on stderr")
    _llm_args(p)
    _server_args(p)
    p.set_defaults(func=cmd_optimize)

    a = sub.add_parser(
        "adapt",
        help="grow the rulebook with short explores over a folder of tasks (AdaExplore's Adapt)",
        description="Run a short optimize on every task in TASKS_DIR (KernelBench files work unchanged) "
        "and print the rules learnt. Seeds: <name>_seed.py beside <name>.py, or seed.py beside "
        "<folder>/task.py; without one, the LLM writes the first kernel, or with --llm none the "
        "cookbook's kernel is tuned when its Model fits the task's (a task with neither is skipped, "
        "and the report says why).",
    )
    a.add_argument("tasks_dir", type=Path, help="folder of task files (or folders holding task.py)")
    a.add_argument(
        "--steps",
        type=int,
        default=None,
        help="candidates per task (default: the preset's, 25 as AdaExplore)",
    )
    _preset_arg(a)
    a.add_argument(
        "--out", type=Path, help="folder for the per-task run directories (default ./kernelcraft-adapt)"
    )
    add_json(a, "the report as JSON")
    a.add_argument("-q", "--quiet", action="store_true", help="no progress display on stderr")
    _llm_args(a)
    _server_args(a)
    a.set_defaults(func=cmd_adapt)
