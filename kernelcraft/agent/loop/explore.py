"""Explore: `kernelcraft optimize` — the AdaExplore loop over the server's search tree.

The server's `search_tree_step` decides what to try next (which node, small or large step, its
context and the active rules); the driver only writes candidates and submits them:

- large step: one LLM call (`submit_kernel`) writing a whole ModelNew that must beat the pool;
- small step: a reviser call (`propose_improvements`, 1–3 concrete changes from the chain, its
  errors and timings; skipped when no kernel of the chain is correct, as in AdaExplore, and when
  the tree's `reviser` is off, as in AdaExplore's adapt: then its fixed guidance), then a
  tuner call (`submit_edits`, shown each version of the chain with its code and metrics) whose
  old/new edits are applied to the parent. Edits that do not apply are skipped, as AdaExplore's
  `str_replace` skips them (after the tree's `edit_retries` retries that show the model why): the
  others are applied, and when none applies the unchanged kernel is evaluated. A step that
  produced no candidate at all (no kernel module from the model) is abandoned
  (`search_tree_step(action="abandon")`) with the reason: the tree records it as failed without
  an evaluation or a rulebook entry, and its next step from that node is of the other kind;
- after a failed candidate, when the tree learns rules (`learn_rules`: adapt's trees; AdaExplore's
  explore freezes them) and the failure is a compile or runtime error (a wrong result names no
  construct to avoid): a rule-proposal call (`propose_rule`: "You cannot …" or "no guidance") and
  `record_failure` with the rule, so the rulebook counts it;
- `--llm none`: every step is the offline tuner's proposal (`tuner/search.py`); a large step jumps to a
  distant configuration of the best pool kernel. Without a GPU, each proposal is first compiled
  for the target (`compile_kernel`), and one that does not compile is recorded and replaced.
- with an LLM, the offline tuner also writes some small steps, at no token cost
  (`--tuner-steps`): `alternate` (default) gives a small step to the tuner when its parent is a
  correct kernel with tunable launch parameters and the previous small step was the LLM's, so the
  two take turns; `only` gives every such small step to the tuner (large steps and fixes of
  failing kernels stay with the LLM); `off` never. When the tuner has nothing left to propose the
  LLM writes the step instead. No rule is proposed after a tuner candidate fails (the server
  still records the failure). Each step's record in `steps.jsonl` names its `proposer`
  (`llm` or `tuner`) and its own `usage` (zero tokens for the tuner).

The tree's configuration (`--preset`, `kernelcraft.schema.presets`) is recorded on the tree; the loop
reads what concerns it (`learn_rules`, `tuner_steps`, `edit_retries`) from the tree, so a resumed
run behaves as it began.

Budgets: steps (the tree's budget), tokens and dollars (checked before every step). A rerun with
the same `--out` resumes: the run directory names the tree, the tree lives in the server's
database, and `status` re-offers the step that was in flight.

`optimize` checks the inputs and the run directory, starts the tree (or resumes it), then hands a
whole `Explorer` (`runloop.py`) its first step; the LLM and the tuner write the candidates
(`proposers.py`). Only this loop writes the run directory.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import logging
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelcraft.agent.llm.config import load_dotenv, make_llm
from kernelcraft.agent.llm.core import Usage, UsageMeter
from kernelcraft.agent.llm.judge import judge_for
from kernelcraft.agent.llm.wrappers import DryRunLLM, LoggedLLM
from kernelcraft.agent.loop.cookbook_seed import TunerMatch, tunable_match
from kernelcraft.agent.loop.options import OptimizeOptions
from kernelcraft.agent.loop.rundir import RunDir
from kernelcraft.agent.loop.runloop import Explorer, StartedRun, save_best, sha256_of
from kernelcraft.agent.loop.session import ToolSession, driver_knobs, open_session
from kernelcraft.agent.tuner.search import find_params
from kernelcraft.base.config import default_db_path
from kernelcraft.base.errors import UsageError
from kernelcraft.base.files import read_text
from kernelcraft.schema.cookbook import CookbookExample
from kernelcraft.schema.presets import config_of
from kernelcraft.schema.tree import NodeInfo, WarmStart

logger = logging.getLogger(__name__)


def find_seed(task: Path) -> Path | None:
    """The seed-kernel conventions: `<task>_seed.py` beside the task, or `seed.py` beside a `task.py`."""
    named = task.with_name(f"{task.stem}_seed.py")
    if named.is_file():
        return named
    if task.name == "task.py" and (task.parent / "seed.py").is_file():
        return task.parent / "seed.py"
    return None


@dataclass(frozen=True)
class RunInputs:
    """The task and seed kernel of a run, read and checked."""

    task_source: str
    seed_path: Path | None
    seed_code: str | None


@dataclass(frozen=True)
class TreePlace:
    """Where the run's tree lives: a team's server, or a database for the in-process one."""

    server_url: str | None
    db_path: Path | None
    default_db: Path | None = None
    """Where the in-process server's database is when `db_path` is None (the settings' own)."""

    @property
    def database(self) -> Path | None:
        """The in-process server's database; None for a team's server."""
        return None if self.server_url else (self.db_path or self.default_db)


async def optimize(opts: OptimizeOptions, session: ToolSession | None = None) -> dict[str, Any]:
    """Run (or resume) one optimisation; returns the summary (also written to summary.json).
    `session`: a session already open (a level's tasks share one server, its evaluator and its
    rulebook); without one, the run opens its own where `opts` and the run directory say."""
    started_at = time.monotonic()
    load_dotenv()
    if opts.dry_run and not opts.dry_run_scratch:
        if opts.llm.kind == "none":
            raise UsageError("--dry-run shows what a language model would be asked; --llm none asks none")
        with tempfile.TemporaryDirectory(prefix="kernelcraft-dry-run-") as scratch:
            # a throwaway run and database: a dry run leaves nothing behind
            where = Path(scratch)
            return await optimize(
                dataclasses.replace(
                    opts,
                    dry_run_scratch=True,
                    out=where / "run",
                    db_path=opts.db_path if opts.server_url else where / "kernelcraft.db",
                    progress=False,
                )
            )
    inputs = read_inputs(opts)
    llm: Any = (
        DryRunLLM(opts.llm.model or "the model", sys.stdout) if opts.dry_run else make_llm(opts.llm)
    )  # a missing key fails here, before anything starts
    run = RunDir(opts.run_dir())
    new_dir = not run.path.exists()
    run.create()
    if llm is not None:  # every prompt and answer, in the run directory
        llm = LoggedLLM(llm, run.path / "prompts.jsonl")
    meta = load_run_meta(run, inputs)
    place = tree_place(opts, meta)
    meter = meter_so_far(run)
    try:
        async with _session(opts, place, session, meter, run) as tools:
            # raised past the session, not in it: its task group would wrap it in a group
            refused: NoStartingKernel | None = None
            try:
                inputs, cookbook = await starting_kernel(opts, inputs, tools)
            except NoStartingKernel as e:
                refused = e
            if refused is None:
                if meta is None:
                    started = await start_tree(opts, inputs, tools, run, place)
                else:
                    started = await resume_tree(opts, inputs, tools, run, meta)
                explorer = Explorer(opts, tools, llm, run, meter, started)
                if cookbook is not None:  # beside a given seed: the first tuner step, the faster kept
                    explorer.tuner.cookbook = (cookbook.id, cookbook.kernel_code)
                return await explorer.explore(started_at)
        if new_dir:  # a task that cannot start leaves no empty run directory behind
            with contextlib.suppress(OSError):
                run.path.rmdir()
        raise refused
    finally:
        if llm is not None:
            await llm.aclose()


class NoStartingKernel(UsageError):
    """A `--llm none` run has no kernel to tune: no seed, and no cookbook entry fits the task. The
    message says why the cookbook's nearest entry does not fit and what to do; a batch (adapt, a
    level) reports the task as skipped with it."""


async def starting_kernel(
    opts: OptimizeOptions, inputs: RunInputs, tools: ToolSession
) -> tuple[RunInputs, CookbookExample | None]:
    """What the run starts from, decided here for `optimize` and so for every task of `adapt` and
    of a level: with an LLM, the seed (if any) as given. With `--llm none`, the offline tuner starts
    from the best kernel known for the task: the cookbook's match when its Model fits the task's
    (`tunable_match`), as the seed when none was given (said on stderr), else beside it (the entry
    returned: the tuner's first step); a task with neither raises `NoStartingKernel`."""
    if opts.llm.kind != "none":
        return inputs, None
    match = await tuner_start(inputs, tools)
    if match.example is None:
        if inputs.seed_code is not None:
            return inputs, None
        raise NoStartingKernel(no_start_message(opts.task, match.why_not))
    if inputs.seed_code is None:
        print(
            f"seed: the cookbook's {match.example.id} kernel (its Model fits the task: same arguments and ops)",
            file=sys.stderr,
        )
        inputs = RunInputs(inputs.task_source, None, match.example.kernel_code)
    return inputs, match.example


def no_start_message(task: Path, why_not: str | None) -> str:
    """Why a `--llm none` run of `task` cannot start, and the three ways to give it a kernel."""
    seed = "seed.py beside it" if task.name == "task.py" else f"{task.stem}_seed.py beside it"
    return (
        f"--llm none needs a kernel to tune and has none: no seed kernel, and "
        f"{why_not or 'no cookbook entry fits its Model'}. Put a seed kernel (a ModelNew with literal "
        f"block sizes) in {seed} (`kernelcraft optimize` of this one task also takes --seed FILE), or use "
        "an LLM (--llm anthropic|openai) to write the first kernel: the offline tuner tunes a kernel, it "
        "does not write one"
    )


async def tuner_start(inputs: RunInputs, tools: ToolSession) -> TunerMatch:
    """The cookbook's match for the offline tuner (`tunable_match`); a server whose cookbook cannot
    be searched offers none, and says why."""
    try:
        return await tunable_match(tools, inputs.task_source)
    except Exception as e:  # noqa: BLE001 - the cookbook helps; a server without it is no failure
        logger.info("no cookbook match for the tuner: %s", e)
        return TunerMatch(None, f"the cookbook could not be searched ({e})")


@asynccontextmanager
async def _session(
    opts: OptimizeOptions, place: TreePlace, shared: ToolSession | None, meter: UsageMeter, run: RunDir
) -> AsyncIterator[ToolSession]:
    """The shared session as it is (its owner closes it), else one opened for this run, whose
    in-process server judges duplicate rules with the run's model (none for a dry run), on the
    run's meter and transcript."""
    if shared is not None:
        yield shared
        return
    judge = None if opts.dry_run else judge_for(opts.llm, place.server_url, meter, run.path / "prompts.jsonl")
    try:
        async with open_session(
            server_url=place.server_url,
            token_env=opts.token_env,
            db_path=place.db_path,
            evaluator=opts.evaluator,
            ray_address=opts.ray_address,
            judge=judge,
            knobs=opts.knobs,
        ) as session:
            yield session
    finally:
        if judge is not None:
            await judge.aclose()


# ------------------------------------------------------------------------------------- validate


def _read(path: Path, what: str) -> str:
    return read_text(path, what)


def read_inputs(opts: OptimizeOptions) -> RunInputs:
    """Read the task and the seed kernel; refuse what cannot run (`--llm none` without a seed the
    tuner can tune, fewer than one step)."""
    task_source = _read(opts.task, "the task")
    seed_path = None if opts.no_seed else opts.seed or find_seed(opts.task)
    seed_code = _read(seed_path, "the seed kernel") if seed_path else None
    if opts.llm.kind == "none" and seed_code is None and opts.no_seed:
        raise UsageError(
            "--llm none with --no-seed has nothing to start from: the offline tuner tunes a seed"
        )
    if seed_code is not None and not _defines_model_new(seed_code, seed_path):
        raise UsageError(
            f"the seed kernel {seed_path} does not define ModelNew (a class taking the task's init "
            "arguments whose forward launches @triton.jit kernels)"
        )
    if opts.llm.kind == "none" and seed_code is not None:
        tunable = find_params(seed_code)
        if not tunable:
            raise UsageError(
                f"the seed kernel {seed_path} has no launch parameters the offline tuner can change (integer "
                "BLOCK_*/num_warps/num_stages literals at a launch or in an autotuned kernel's triton.Config, "
                "or constants passed to a launch); give them literal values, or use an LLM "
                "(--llm anthropic|openai)"
            )
    if opts.steps < 1:
        raise UsageError("--steps must be at least 1")
    if opts.parallel < 1:
        raise UsageError("--parallel must be at least 1")
    return RunInputs(task_source, seed_path, seed_code)


def _defines_model_new(code: str, path: Path | None) -> bool:
    """Whether the module binds ModelNew at its top level; a `UsageError` if it does not parse."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError) as e:
        where = f" (line {e.lineno})" if isinstance(e, SyntaxError) else ""
        raise UsageError(f"the seed kernel {path} does not parse: {getattr(e, 'msg', e)}{where}") from e
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "ModelNew":
            return True
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "ModelNew" for t in node.targets
        ):
            return True
        if isinstance(node, ast.ImportFrom) and any((a.asname or a.name) == "ModelNew" for a in node.names):
            return True
    return False


def load_run_meta(run: RunDir, inputs: RunInputs) -> dict[str, Any] | None:
    """The run directory's run.json (None for a new run); refused when it holds another task's run."""
    meta = run.load_run()
    if meta is not None and meta.get("task_sha256") != sha256_of(inputs.task_source):
        raise UsageError(
            f"{run.path} holds a run of another task ({meta.get('task')}); pick another --out to start a "
            "new run, or restore that task file to resume it"
        )
    return meta


def tree_place(opts: OptimizeOptions, meta: dict[str, Any] | None) -> TreePlace:
    """The flags win; a resumed run falls back to where its tree was started."""
    db_path = opts.db_path
    server_url = opts.server_url
    if meta is not None:
        server_url = server_url or meta.get("server_url")
        if db_path is None and meta.get("db_path") and not server_url:
            db_path = Path(meta["db_path"])
    default = None if server_url or db_path else default_db_path(driver_knobs(opts.knobs).paths)
    return TreePlace(server_url, db_path, default)


def meter_so_far(run: RunDir) -> UsageMeter:
    """The tokens and dollars a resumed run has spent already (from its last step's record)."""
    previous = run.steps()
    if previous and previous[-1].get("usage_total"):
        return UsageMeter(total=Usage.from_dict(previous[-1]["usage_total"]))
    return UsageMeter()


# --------------------------------------------------------------------------------------- create


async def start_tree(
    opts: OptimizeOptions, inputs: RunInputs, session: ToolSession, run: RunDir, place: TreePlace
) -> StartedRun:
    """A new tree on the server, its seed evaluated; run.json names it for a later resume."""
    result = await session.start(
        inputs.task_source,
        task_name=opts.task.parent.name if opts.task.name == "task.py" else opts.task.name,
        seed_code=inputs.seed_code,
        target=opts.target,
        budget=opts.steps,
        seed=opts.search_seed,
        policy=opts.policy,
        preset=opts.preset,
        params=opts.tree_params(),
    )
    tree_id = result.tree.id
    if result.warm_start is not None:  # the first line of the run's output: state it did not ask for
        print(warm_start_line(result.warm_start, place), file=sys.stderr, flush=True)
    seed_node = result.seed_node
    seed_outcome = seed_node.outcome if seed_node else None
    run.save_run(_run_meta(opts, inputs, place, tree_id, seed_outcome))
    best, measured = None, True
    if seed_node is not None and seed_node.outcome == "correct" and inputs.seed_code is not None:
        measured = result.next_step.speedup_measured if result.next_step else True
        best = _keep_best(run, opts, tree_id, seed_node, inputs.seed_code, measured)
    return StartedRun(
        task_source=inputs.task_source,
        seed_code=inputs.seed_code,
        seed_outcome=seed_outcome,
        tree_id=tree_id,
        target=opts.target,
        budget=result.tree.budget,
        measured=measured,
        best=best,
        best_code=inputs.seed_code if best is not None else None,
        step=result.next_step,
        note=None,
        message=result.message,
        config=config_of(dict(result.tree.params)),
    )


def warm_start_line(warm: WarmStart, place: TreePlace) -> str:
    """What a new tree starts from when the database already holds a tree for the task."""
    where = place.server_url or f"the database {place.database}"
    speed = f"{warm.speedup:.2f}x vs PyTorch" if warm.speedup is not None else "speed not measured"
    match = "the same task source" if warm.match == "task_hash" else "the same operator and shapes"
    return (
        f"warm start: the tree starts from node {warm.node_id}, the best kernel of tree {warm.tree_id} "
        f"({speed}; {match}) in {where}; --fresh starts without it"
    )


def _run_meta(
    opts: OptimizeOptions, inputs: RunInputs, place: TreePlace, tree_id: int, seed_outcome: str | None
) -> dict[str, Any]:
    """run.json: what a rerun with the same --out resumes."""
    return {
        "version": 1,
        "tree_id": tree_id,
        "server_url": place.server_url,
        "db_path": str(place.database.resolve()) if place.database else None,
        "task": str(opts.task.resolve()),
        "task_sha256": sha256_of(inputs.task_source),
        "seed": str(inputs.seed_path.resolve()) if inputs.seed_path else None,
        "target": opts.target,
        "budget": opts.steps,
        "preset": opts.preset,
        "llm": opts.llm.kind,
        "seed_outcome": seed_outcome,
    }


async def resume_tree(
    opts: OptimizeOptions, inputs: RunInputs, session: ToolSession, run: RunDir, meta: dict[str, Any]
) -> StartedRun:
    """The tree run.json names, as the server's `status` has it: the step in flight is re-offered."""
    tree_id = int(meta["tree_id"])
    status = await session.status(tree_id)
    message = (
        f"Resuming tree {tree_id} from {run.path}: {status.budget_used} of {status.tree.budget} "
        f"candidates evaluated, {len(run.steps())} steps in steps.jsonl."
    )
    measured = status.next_step.speedup_measured if status.next_step is not None else True
    best = None
    if status.best is not None and status.best.code is not None:
        best = _keep_best(run, opts, tree_id, status.best, status.best.code, measured)
    return StartedRun(
        task_source=inputs.task_source,
        seed_code=inputs.seed_code,
        seed_outcome=meta.get("seed_outcome"),
        tree_id=tree_id,
        target=meta.get("target", opts.target),
        budget=status.tree.budget,
        measured=measured,
        best=best,
        best_code=best.code if best is not None else None,
        step=status.next_step,
        note=status.next_step_note,
        message=message,
        config=config_of(dict(status.tree.params)),
    )


def _keep_best(
    run: RunDir, opts: OptimizeOptions, tree_id: int, node: NodeInfo, code: str, measured: bool
) -> NodeInfo | None:
    """A correct kernel becomes the run's best (best_kernel.py); any other is not kept."""
    if node.outcome != "correct":
        return None
    save_best(run, opts, tree_id, node, code, measured)
    return node
