"""Explore: `kernelcraft optimize` — the AdaExplore loop over the server's search tree.

The server's `search_tree_step` decides what to try next (which node, small or large step, its
context and the active rules); the driver only writes candidates and submits them:

- large step: one LLM call (`submit_kernel`) writing a whole ModelNew that must beat the pool;
- small step: a reviser call (`propose_improvements`, 1–3 concrete changes from the chain, its
  errors and timings; skipped when no kernel of the chain is correct, as in AdaExplore), then a
  tuner call (`submit_edits`) whose old/new edits are applied to the parent. Edits that do not
  apply (after one retry that shows the model why) make a failed step: the driver abandons it
  (`search_tree_step(action="abandon")`) with that reason, so the tree records the step as failed
  without an evaluation or a rulebook entry, and its policy moves on (its rule: after a failed
  step, the other kind);
- after a failed candidate: a rule-proposal call (`propose_rule`: "You cannot …" or "no guidance")
  and `record_failure` with the rule, so the rulebook counts it;
- `--llm none`: every step is the offline tuner's proposal (`tuner.py`); a large step jumps to a
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

Budgets: steps (the tree's budget), tokens and dollars (checked before every step). A rerun with
the same `--out` resumes: the run directory names the tree, the tree lives in the server's
database, and `status` re-offers the step that was in flight.

Only this loop writes the run directory.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from kernelcraft.agent import prompts
from kernelcraft.agent.edits import EditError, apply_edits, parse_edits
from kernelcraft.agent.llm import (
    ANSWER_TOOLS,
    LLM,
    LLMConfig,
    Message,
    Usage,
    UsageMeter,
    load_dotenv,
    make_llm,
)
from kernelcraft.agent.rundir import Progress, RunDir
from kernelcraft.agent.session import ToolSession, open_session
from kernelcraft.agent.tuner import (
    SHARED_LIMIT_BYTES,
    Observation,
    Space,
    apply_config,
    current_config,
    family_of,
    find_params,
    next_config,
)
from kernelcraft.base.errors import LLMError, UsageError
from kernelcraft.base.evaluation import CompileResult
from kernelcraft.base.tree import ContextKernel, NextStep, NodeInfo, SubmitResult

logger = logging.getLogger(__name__)

GPU_NOTE = (
    "No GPU here: every candidate was verified in Triton's CPU interpreter{compiled}, so correctness "
    "is real but speed is not measured (the tree scores a correct kernel as parity). On a GPU (or "
    "with --server pointing at a GPU server) each candidate is also timed against PyTorch eager and "
    "torch.compile, and the search then optimises speedup."
)
PRECHECK_TRIES = 4
TunerSteps = Literal["off", "alternate", "only"]
Proposer = Literal["llm", "tuner"]


def find_seed(task: Path) -> Path | None:
    """The seed-kernel conventions: `<task>_seed.py` beside the task, or `seed.py` beside a `task.py`."""
    named = task.with_name(f"{task.stem}_seed.py")
    if named.is_file():
        return named
    if task.name == "task.py" and (task.parent / "seed.py").is_file():
        return task.parent / "seed.py"
    return None


@dataclass
class OptimizeOptions:
    task: Path
    seed: Path | None = None
    steps: int = 10
    llm: LLMConfig = field(default_factory=LLMConfig)
    out: Path | None = None
    target: str = "sm_90a"
    policy: str = "adaexplore"
    server_url: str | None = None
    token_env: str | None = None
    db_path: Path | None = None
    max_total_tokens: int | None = None
    max_dollars: float | None = None
    search_seed: int = 0
    progress: bool = True
    edit_retries: int = 1
    compile_check: bool = True
    tuner_steps: TunerSteps = "alternate"  # with an LLM: which small steps the offline tuner writes

    def run_dir(self) -> Path:
        """--out, else ./kernelcraft-runs/<task name> (the folder's name for a `task.py`)."""
        if self.out is not None:
            return self.out
        return Path("kernelcraft-runs") / (
            self.task.parent.name if self.task.name == "task.py" else self.task.stem
        )


def _read(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as e:
        raise UsageError(f"cannot read {what} {path}: {e}") from e


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# Before `abandon` existed the driver submitted a module that raised with the reason; trees from
# those runs still hold such placeholders, which are never refined.
FAILED_STEP_HEADER = '"""kernelcraft driver: this step produced no candidate."""'


def is_failed_step(code: str | None) -> bool:
    return code is not None and code.startswith(FAILED_STEP_HEADER)


def shared_fraction(result: CompileResult, target: str) -> float | None:
    limit = SHARED_LIMIT_BYTES.get(target)
    if not limit:
        return None
    used = [
        k.shared_bytes
        for t in result.targets
        if t.target == target
        for k in t.kernels
        if k.shared_bytes is not None
    ]
    return max(used) / limit if used else None


@dataclass
class StepOutcome:
    """A candidate for the step, or (`code` None) the reason the step produced none."""

    code: str | None
    info: dict[str, Any] = field(default_factory=dict)
    driver_failure: str | None = None

    @classmethod
    def failed(cls, reason: str, info: dict[str, Any]) -> StepOutcome:
        return cls(None, info, reason)


class Explorer:
    """One optimisation run: a session to the server, an optional LLM, a run directory."""

    def __init__(
        self, opts: OptimizeOptions, session: ToolSession, llm: LLM | None, run: RunDir, meter: UsageMeter
    ) -> None:
        self.opts = opts
        self.session = session
        self.llm = llm
        self.run = run
        self.meter = meter
        self.task_source = ""
        self.seed_code: str | None = None
        self.seed_outcome: str | None = None
        self.tree_id = 0
        self.records = run.steps()
        self.failures: Counter[str] = Counter(
            r["failure_class"]
            for r in self.records
            if r.get("failure_class") and r.get("outcome") != "correct"
        )
        self.best: NodeInfo | None = None
        self.best_code: str | None = None
        self.measured = True
        self.compiled_any = False
        self.progress = Progress(opts.steps, enabled=opts.progress)
        self.step_usage = Usage()

    # ------------------------------------------------------------------------- LLM calls

    async def ask(self, prompt: str, tool: str) -> dict[str, Any] | None:
        assert self.llm is not None
        reply = await self.llm.call(prompts.SYSTEM, [Message("user", prompt)], list(ANSWER_TOOLS), tool)
        self.meter.add(reply.usage)
        self.step_usage.add(reply.usage)
        if reply.tool_call is None:
            logger.warning("the model answered without calling %s: %s", tool, reply.text[:200])
            return None
        return reply.tool_call.input

    async def llm_large(self, step: NextStep) -> StepOutcome:
        answer = await self.ask(prompts.large_step(step), "submit_kernel")
        code = answer.get("code") if answer else None
        if not isinstance(code, str) or "ModelNew" not in code:
            reason = "the model returned no kernel module (no submit_kernel call with a ModelNew)"
            return StepOutcome.failed(reason, {"mode": "llm"})
        return StepOutcome(code, {"mode": "llm", "notes": (answer or {}).get("notes")})

    async def llm_small(self, step: NextStep) -> StepOutcome:
        parent = step.start_code or ""
        if is_failed_step(parent):
            # nothing to refine: the node is a step that produced no kernel; write one instead
            prompt = (
                prompts.large_step(step)
                + "\n\nThe kernel in start_code is a placeholder for a step that produced nothing: "
                "ignore it and write a complete, correct kernel for the task."
            )
            answer = await self.ask(prompt, "submit_kernel")
            code = answer.get("code") if answer else None
            if not isinstance(code, str) or "ModelNew" not in code:
                why = "the model returned no kernel module (no submit_kernel call with a ModelNew)"
                return StepOutcome.failed(why, {"mode": "llm"})
            return StepOutcome(code, {"mode": "llm", "rewrote_failed_step": True})
        if step.chain and all(k.outcome != "correct" for k in step.chain):
            last = step.chain[-1]
            improvements = [f"Fix the failure of the current kernel: {prompts.describe_kernel(last)[:1500]}"]
        else:
            answer = await self.ask(prompts.reviser(step), "propose_improvements")
            items = answer.get("items") if answer else None
            improvements = [str(i) for i in items][:3] if isinstance(items, list) and items else []
            if not improvements:
                improvements = ["Make the kernel faster with one concrete change, keeping it correct."]
        reason: str | None = None
        for _ in range(1 + self.opts.edit_retries):
            answer = await self.ask(prompts.tuner(step, improvements, reason), "submit_edits")
            try:
                edits = parse_edits(answer.get("edits") if answer else None)
                code = apply_edits(parent, edits)
            except EditError as e:
                reason = str(e)
                continue
            return StepOutcome(code, {"mode": "llm", "improvements": improvements, "edits": len(edits)})
        why = f"the tuner's edits did not apply: {reason}"
        return StepOutcome.failed(why, {"mode": "llm", "improvements": improvements})

    # ------------------------------------------------------------------------ the tuner

    def observations(self, family: str) -> list[Observation]:
        obs: list[Observation] = []
        for r in self.records:
            obs.extend(
                Observation(rej["config"], ok=False, failure_class=rej.get("failure_class"))
                for rej in r.get("rejected", [])
                if rej.get("family") == family
            )
            t = r.get("tuner")
            if t and t.get("family") == family:
                obs.append(
                    Observation(
                        t["config"],
                        ok=r.get("outcome") == "correct",
                        time_us=r.get("candidate_us"),
                        failure_class=r.get("failure_class"),
                        shared_fraction=t.get("shared_fraction"),
                    )
                )
        return obs

    def context_observations(self, family: str, step: NextStep) -> list[Observation]:
        """Kernels the tree shows (chain, pool) and the seed, when they are of this family: their
        configurations count as tried, with their verdicts and times."""
        kernels: list[tuple[str, bool, float | None]] = [
            (k.code, k.outcome == "correct", k.candidate_us) for k in [*step.chain, *step.pool]
        ]
        if self.seed_code is not None and self.seed_outcome is not None:
            kernels.append((self.seed_code, self.seed_outcome == "correct", None))
        out = []
        for code, ok, time_us in kernels:
            try:
                params = find_params(code)
            except SyntaxError:
                continue
            if params and family_of(code, params) == family:
                out.append(Observation(current_config(params), ok=ok, time_us=time_us))
        return out

    def _pool_base(self, pool: list[ContextKernel]) -> str | None:
        correct = [k for k in pool if k.outcome == "correct"]
        if correct:
            return max(correct, key=lambda k: k.speedup or 0.0).code
        return self.best_code or self.seed_code

    async def tuner_step(self, step: NextStep) -> StepOutcome:
        jump = step.kind == "large"
        base = self._pool_base(step.pool) if jump else step.start_code
        if is_failed_step(base):  # a step that produced nothing: tune the best kernel instead
            base, jump = self._pool_base([]), True
        if not base:
            reason = "the offline tuner has no kernel to start from (no correct kernel and no seed)"
            return StepOutcome.failed(reason, {"mode": "tuner"})
        try:
            params = find_params(base)
        except SyntaxError as e:
            reason = f"the kernel does not parse ({e.msg}, line {e.lineno}); the tuner cannot read it"
            return StepOutcome.failed(reason, {"mode": "tuner"})
        if not params:
            reason = "the kernel has no tunable launch parameters (block sizes, num_warps, num_stages)"
            return StepOutcome.failed(reason, {"mode": "tuner"})
        family = family_of(base, params)
        space = Space.of(params)
        start = current_config(params)
        obs = self.observations(family) + self.context_observations(family, step)
        rejected: list[dict[str, Any]] = []
        for _ in range(PRECHECK_TRIES):
            config = next_config(space, start, obs, seed=self.opts.search_seed, jump=jump)
            if config is None:
                reason = "the offline tuner has tried every allowed configuration of this kernel"
                return StepOutcome.failed(reason, {"mode": "tuner", "rejected": rejected})
            code = apply_config(base, params, config)
            info: dict[str, Any] = {
                "mode": "tuner",
                "tuner": {
                    "family": family,
                    "config": config,
                    "changed": {k: [start[k], v] for k, v in config.items() if v != start[k]},
                },
                "rejected": rejected,
            }
            if self.opts.compile_check and not step.speedup_measured:
                compiled = await self.session.compile(self.task_source, code, [step.target])
                self.compiled_any = True
                frac = shared_fraction(compiled, step.target)
                info["tuner"]["shared_fraction"] = frac
                if not compiled.ok:
                    cls = compiled.failure_class.value if compiled.failure_class else "compile_error"
                    rejected.append({"family": family, "config": config, "failure_class": cls})
                    obs.append(Observation(config, ok=False, failure_class=cls))
                    error = next((t.error for t in compiled.targets if t.error), None) or cls
                    await self.session.record_failure(
                        code,
                        error,
                        reference_code=self.task_source,
                        arch=step.target,
                        rule=None,
                        failure_class=compiled.failure_class,
                    )
                    continue
            return StepOutcome(code, info)
        reason = f"{PRECHECK_TRIES} tuner proposals in a row failed to compile for {step.target}"
        return StepOutcome.failed(reason, {"mode": "tuner", "rejected": rejected})

    # ---------------------------------------------------------------------- the loop

    def _best_label(self) -> str:
        b = self.best
        if b is None:
            return "none correct yet"
        if b.speedup is not None and self.measured:
            return f"{b.speedup:.2f}x (node {b.id})"
        return f"correct, speed unmeasured (node {b.id})"

    def _update_best(self, best: NodeInfo | None, code: str | None) -> None:
        if best is None or best.outcome != "correct":
            return
        if code is None and self.best is not None and self.best.id == best.id:
            return
        self.best = best
        if code is not None:
            self.best_code = code
            speed = (
                f"{best.speedup:.2f}x vs PyTorch"
                if best.speedup is not None and self.measured
                else "speed not measured (no GPU)"
            )
            self.run.save_best(
                code,
                f"kernelcraft best kernel: tree {self.tree_id}, node {best.id}, correct, {speed}.\n"
                f"Task: {self.opts.task}. Import ModelNew from this module.",
            )

    async def propose_rule(self, code: str, node: NodeInfo) -> dict[str, Any] | None:
        error = node.error or (node.failure_class.value if node.failure_class else "failed")
        cls = node.failure_class.value if node.failure_class else None
        answer = await self.ask(prompts.rule_proposal(code, error, cls), "propose_rule")
        text = str(answer.get("text", "")) if answer else ""
        rule = prompts.normalize_rule(text)
        if rule is None:
            return {"proposed": text[:300] or None, "recorded": False}
        recorded = await self.session.record_failure(
            code,
            error,
            reference_code=self.task_source,
            arch=self.opts.target,
            rule=rule,
            failure_class=node.failure_class,
            failure_id=node.failure_id,
        )
        return {
            "proposed": rule,
            "recorded": True,
            "action": recorded.rule_action,
            "rule_count": recorded.rule.count if recorded.rule else None,
        }

    def _budget_stop(self) -> str | None:
        total = self.meter.total
        if self.opts.max_total_tokens is not None and total.total_tokens >= self.opts.max_total_tokens:
            return f"token budget spent ({total.total_tokens:,} of {self.opts.max_total_tokens:,})"
        if (
            self.opts.max_dollars is not None
            and total.cost_usd is not None
            and total.cost_usd >= self.opts.max_dollars
        ):
            return f"dollar budget spent (${total.cost_usd:.4f} of ${self.opts.max_dollars:.2f})"
        return None

    def small_proposer(self, step: NextStep) -> Proposer:
        """Who writes a small step when an LLM is on (see `--tuner-steps` in the module docstring)."""
        if self.opts.tuner_steps == "off":
            return "llm"
        parent = step.chain[-1] if step.chain else None  # the chain ends with the kernel to refine
        if parent is None or parent.node_id != step.parent_id or parent.outcome != "correct":
            return "llm"  # a failing kernel needs a fix, which only the LLM can write
        try:
            if not find_params(parent.code):
                return "llm"
        except SyntaxError:
            return "llm"
        if self.opts.tuner_steps == "only":
            return "tuner"
        last = next((r for r in reversed(self.records) if r.get("kind") == "small"), None)
        return "tuner" if last is not None and last.get("proposer", last.get("mode")) == "llm" else "llm"

    async def step_once(self, step: NextStep) -> SubmitResult:
        t0 = time.monotonic()
        self.step_usage = Usage()
        fallback: str | None = None
        if self.llm is None:
            outcome = await self.tuner_step(step)
        elif step.kind == "large":
            outcome = await self.llm_large(step)
        elif self.small_proposer(step) == "tuner":
            outcome = await self.tuner_step(step)
            if outcome.code is None:  # nothing left to tune: the LLM writes the step after all
                fallback = outcome.driver_failure
                outcome = await self.llm_small(step)
        else:
            outcome = await self.llm_small(step)
        proposer: Proposer = "tuner" if outcome.info.get("mode") == "tuner" else "llm"
        if outcome.code is None:
            reason = outcome.driver_failure or "the step produced no candidate"
            result = await self.session.abandon(step.tree_id, step.node_id, reason)
        else:
            result = await self.session.submit(step.tree_id, step.node_id, outcome.code)
        node = result.node
        self.measured = step.speedup_measured
        record: dict[str, Any] = {
            "step": len(self.records) + 1,
            "tree_id": step.tree_id,
            "node_id": step.node_id,
            "parent_id": step.parent_id,
            "kind": step.kind,
            "reason": step.reason,
            "proposer": proposer,
            **outcome.info,
            "tuner_fallback": fallback,
            "driver_failure": outcome.driver_failure,
            "outcome": node.outcome,
            "failure_class": node.failure_class.value if node.failure_class else None,
            "error": (node.error or "")[:2000] or None,
            "speedup": node.speedup,
            "candidate_us": node.candidate_us,
            "reward": node.reward,
            "new_best": result.new_best,
            "code_sha256": _sha(outcome.code) if outcome.code is not None else None,
        }
        if node.outcome != "correct":
            if node.failure_class:
                self.failures[node.failure_class.value] += 1
            # a failed tuner proposal is a bad configuration, not a lesson worth tokens
            if self.llm is not None and outcome.code is not None and proposer == "llm":
                record["rule"] = await self.propose_rule(outcome.code, node)
        record["seconds"] = round(time.monotonic() - t0, 3)
        record["usage"] = self.step_usage.to_dict()
        record["usage_total"] = self.meter.total.to_dict()
        self.run.append_step(record)
        self.records.append(record)
        if result.new_best and outcome.code is not None:
            self._update_best(result.best or node, outcome.code)
        return result

    def summary(self, stopped: str, started: float) -> dict[str, Any]:
        usage = self.meter.total.to_dict()
        correct = sum(1 for r in self.records if r.get("outcome") == "correct")
        best = self.best
        note = (
            None
            if self.measured
            else GPU_NOTE.format(
                compiled=f" and compiled for {self.opts.target}" if self.compiled_any else ""
            )
        )
        return {
            "task": str(self.opts.task),
            "tree_id": self.tree_id,
            "server": self.session.where,
            "target": self.opts.target,
            "llm": self.opts.llm.kind,
            "model": self.llm.model if self.llm is not None else None,
            "steps_done": len(self.records),
            "correct": correct,
            "failures_by_class": dict(self.failures),
            "driver_failures": sum(1 for r in self.records if r.get("driver_failure")),
            "steps_by_proposer": dict(Counter(r.get("proposer", r.get("mode")) for r in self.records)),
            "best": None
            if best is None
            else {
                "node_id": best.id,
                "speedup": best.speedup if self.measured else None,
                "candidate_us": best.candidate_us,
                "path": str(self.run.best_file) if self.run.best_file.exists() else None,
            },
            "speedup_measured": self.measured,
            "gpu_note": note,
            "usage": usage,
            "stopped_because": stopped,
            "run_dir": str(self.run.path),
            "seconds": round(time.monotonic() - started, 1),
        }

    async def run_loop(self, step: NextStep | None, note: str | None) -> str:
        while step is not None:
            spent = self._budget_stop()
            if spent:
                return (
                    spent + f"; rerun with the same --out and a larger budget to continue tree {self.tree_id}"
                )
            self.progress.show(
                self.progress.line(
                    step=len(self.records) + 1,
                    best=self._best_label(),
                    failures=dict(self.failures),
                    tokens=self.meter.total.total_tokens,
                    cost=self.meter.total.cost_usd,
                    note=f"{step.kind} step on node {step.parent_id}",
                )
            )
            result = await self.step_once(step)
            self.progress.show(
                self.progress.line(
                    step=len(self.records),
                    best=self._best_label(),
                    failures=dict(self.failures),
                    tokens=self.meter.total.total_tokens,
                    cost=self.meter.total.cost_usd,
                    note=f"node {result.node.id}: {result.node.outcome}",
                )
            )
            step, note = result.next_step, result.next_step_note
        return note or "the tree's budget is spent"


async def optimize(opts: OptimizeOptions) -> dict[str, Any]:
    """Run (or resume) one optimisation; returns the summary (also written to summary.json)."""
    started = time.monotonic()
    load_dotenv()
    task_source = _read(opts.task, "the task")
    seed_path = opts.seed or find_seed(opts.task)
    seed_code = _read(seed_path, "the seed kernel") if seed_path else None
    if opts.llm.kind == "none" and seed_code is None:
        raise UsageError(
            f"--llm none needs a seed kernel to tune: pass --seed FILE, or put {opts.task.stem}_seed.py "
            f"(or seed.py beside a task.py) next to {opts.task}; the offline tuner tunes a kernel, it "
            "does not write one"
        )
    if opts.llm.kind == "none" and seed_code is not None:
        try:
            tunable = find_params(seed_code)
        except SyntaxError as e:
            raise UsageError(f"the seed kernel {seed_path} does not parse: {e.msg} (line {e.lineno})") from e
        if not tunable:
            raise UsageError(
                f"the seed kernel {seed_path} has no launch parameters the offline tuner can change (integer "
                "BLOCK_*/num_warps/num_stages literals at a launch, or constants passed to one); give them "
                "literal values, or use an LLM (--llm anthropic|openai)"
            )
    if opts.steps < 1:
        raise UsageError("--steps must be at least 1")
    llm = make_llm(opts.llm)  # a missing key fails here, before anything starts
    run = RunDir(opts.run_dir())
    run.create()
    meta = run.load_run()
    if meta is not None and meta.get("task_sha256") != _sha(task_source):
        raise UsageError(
            f"{run.path} holds a run of another task ({meta.get('task')}); pick another --out to start a "
            "new run, or restore that task file to resume it"
        )
    db_path = opts.db_path
    server_url = opts.server_url
    if meta is not None:
        server_url = server_url or meta.get("server_url")
        if db_path is None and meta.get("db_path") and not server_url:
            db_path = Path(meta["db_path"])
    meter = UsageMeter()
    previous = run.steps()
    if previous and previous[-1].get("usage_total"):
        meter.total = Usage.from_dict(previous[-1]["usage_total"])
    try:
        async with open_session(server_url=server_url, token_env=opts.token_env, db_path=db_path) as session:
            ex = Explorer(opts, session, llm, run, meter)
            ex.task_source, ex.seed_code = task_source, seed_code
            if meta is None:
                started_tree = await session.start(
                    task_source,
                    task_name=opts.task.parent.name if opts.task.name == "task.py" else opts.task.name,
                    seed_code=seed_code,
                    target=opts.target,
                    budget=opts.steps,
                    seed=opts.search_seed,
                    policy=opts.policy,
                )
                ex.tree_id = started_tree.tree.id
                from kernelcraft.base.config import default_db_path

                run.save_run(
                    {
                        "version": 1,
                        "tree_id": ex.tree_id,
                        "server_url": server_url,
                        "db_path": None if server_url else str((db_path or default_db_path()).resolve()),
                        "task": str(opts.task.resolve()),
                        "task_sha256": _sha(task_source),
                        "seed": str(seed_path.resolve()) if seed_path else None,
                        "target": opts.target,
                        "budget": opts.steps,
                        "llm": opts.llm.kind,
                        "seed_outcome": started_tree.seed_node.outcome if started_tree.seed_node else None,
                    }
                )
                ex.seed_outcome = started_tree.seed_node.outcome if started_tree.seed_node else None
                ex.progress.message(started_tree.message)
                step, note = started_tree.next_step, None
                seed_node = started_tree.seed_node
                if seed_node is not None and seed_node.outcome == "correct" and seed_code is not None:
                    ex.measured = started_tree.next_step.speedup_measured if started_tree.next_step else True
                    ex._update_best(seed_node, seed_code)
            else:
                ex.tree_id = int(meta["tree_id"])
                ex.seed_outcome = meta.get("seed_outcome")
                opts.target = meta.get("target", opts.target)
                status = await session.status(ex.tree_id)
                ex.progress.total = status.tree.budget
                ex.progress.message(
                    f"Resuming tree {ex.tree_id} from {run.path}: {status.budget_used} of {status.tree.budget} "
                    f"candidates evaluated, {len(ex.records)} steps in steps.jsonl."
                )
                if status.next_step is not None:
                    ex.measured = status.next_step.speedup_measured
                if status.best is not None and status.best.code is not None:
                    ex._update_best(status.best, status.best.code)
                step, note = status.next_step, status.next_step_note
            try:
                stopped = await ex.run_loop(step, note)
            except LLMError as e:
                ex.progress.done()
                run.save_summary(ex.summary(f"LLM error: {e}", started))
                raise
            ex.progress.done()
            summary = ex.summary(stopped, started)
            run.save_summary(summary)
            ex.progress.message(_final_words(summary))
            return summary
    finally:
        if llm is not None:
            await llm.aclose()


def _final_words(s: dict[str, Any]) -> str:
    best = s["best"]
    if best is None:
        head = "No correct kernel found."
    elif best["speedup"] is not None:
        head = f"Best: node {best['node_id']}, {best['speedup']:.2f}x vs PyTorch -> {best['path']}"
    else:
        head = f"Best: node {best['node_id']} (correct; speed not measured) -> {best['path']}"
    lines = [
        f"{head}",
        f"{s['steps_done']} steps, {s['correct']} correct; stopped: {s['stopped_because']}. Run directory: {s['run_dir']}",
    ]
    if s.get("gpu_note"):
        lines.append(s["gpu_note"])
    return "\n".join(lines)
