"""The explore loop proper: step after step until the tree, token or dollar budget is spent.

`Explorer` is built whole from a `StartedRun` (the tree `optimize` started or resumed, its
configuration and its first step); per step it picks who writes the candidate (`small_proposer`),
submits it (or abandons the step), proposes a rule after an LLM's failed candidate when the tree
learns rules and the failure is a compile or runtime error, appends the step's record to
`steps.jsonl` and keeps `best_kernel.py` current. Only this loop writes the run directory's steps.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Literal

from kernelcraft.agent.llm.core import LLM, Usage, UsageMeter
from kernelcraft.agent.loop.options import OptimizeOptions
from kernelcraft.agent.loop.proposers import LLMProposer, StepOutcome, TunerProposer
from kernelcraft.agent.loop.rundir import Progress, RunDir
from kernelcraft.agent.loop.runreport import write_run_report
from kernelcraft.agent.loop.runwords import GPU_NOTE, final_words, run_stop, step_seconds, tuner_axis_seconds
from kernelcraft.agent.loop.session import ToolSession
from kernelcraft.agent.tuner.search import find_params
from kernelcraft.base.errors import KernelcraftError, LLMError
from kernelcraft.base.failures import NOT_THE_CANDIDATES, WRONG_RESULT_CLASSES
from kernelcraft.schema.presets import SearchConfig, TunerSteps
from kernelcraft.schema.tree import NextStep, NodeInfo, SubmitResult, is_budget_held

Proposer = Literal["llm", "tuner"]


def sha256_of(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class StartedRun:
    """What a run starts from: the task and seed, the tree `start` created (or `status` found, on a
    resume) and its configuration, its best correct kernel so far and the first step to write (or
    why there is none)."""

    task_source: str
    seed_code: str | None
    seed_outcome: str | None
    tree_id: int
    target: str
    budget: int
    measured: bool
    best: NodeInfo | None
    best_code: str | None
    step: NextStep | None
    note: str | None
    message: str
    config: SearchConfig


def save_best(
    run: RunDir, opts: OptimizeOptions, tree_id: int, best: NodeInfo, code: str, measured: bool
) -> None:
    """`best_kernel.py`: the kernel, under a header that says where it comes from."""
    speed = (
        f"{best.speedup:.2f}x vs PyTorch"
        if best.speedup is not None and measured
        else "speed not measured (no GPU)"
    )
    run.save_best(
        code,
        f"kernelcraft best kernel: tree {tree_id}, node {best.id}, correct, {speed}.\n"
        f"Task: {opts.task}. Import ModelNew from this module.",
    )


def learns_from(node: NodeInfo) -> bool:
    """Whether a rule is proposed for a failed candidate: compile and runtime errors name a construct
    to avoid; a wrong result (a mismatch, NaNs, a wrong shape) does not (AdaExplore's filter)."""
    return (
        node.failure_class is not None
        and node.failure_class not in WRONG_RESULT_CLASSES
        and node.failure_class not in NOT_THE_CANDIDATES  # a limit of ours names no construct
    )


def small_proposer(step: NextStep, tuner_steps: TunerSteps, records: list[dict[str, Any]]) -> Proposer:
    """Who writes a small step when an LLM is on (see `--tuner-steps` in `explore.py`'s docstring)."""
    if tuner_steps == "off":
        return "llm"
    parent = step.chain[-1] if step.chain else None  # the chain ends with the kernel to refine
    if parent is None or parent.node_id != step.parent_id or parent.outcome != "correct":
        return "llm"  # a failing kernel needs a fix, which only the LLM can write
    try:
        if not find_params(parent.code or ""):
            return "llm"
    except SyntaxError:
        return "llm"
    if tuner_steps == "only":
        return "tuner"
    last = next((r for r in reversed(records) if r.get("kind") == "small"), None)
    return "tuner" if last is not None and last.get("proposer", last.get("mode")) == "llm" else "llm"


class Explorer:
    """One optimisation run: a session to the server, an optional LLM, a run directory."""

    def __init__(
        self,
        opts: OptimizeOptions,
        session: ToolSession,
        llm: LLM | None,
        run: RunDir,
        meter: UsageMeter,
        started: StartedRun,
    ) -> None:
        self.opts = opts
        self.session = session
        self.llm = llm
        self.run = run
        self.meter = meter
        self.started = started
        self.config = started.config
        self.tuner_steps: TunerSteps = opts.tuner_steps or started.config.tuner_steps
        self.tree_id = started.tree_id
        self.target = started.target
        self.records = run.steps()
        self.failures: Counter[str] = Counter(
            r["failure_class"]
            for r in self.records
            if r.get("failure_class") and r.get("outcome") != "correct"
        )
        self.pending: list[dict[str, Any]] = []  # steps being evaluated (--parallel): their proposals
        self._tuner_lock = asyncio.Lock()
        self.best_roofline: float | None = None  # the best kernel's roofline fraction (roofline_stop)
        self.best = started.best
        self.best_code = started.best_code
        self.measured = started.measured
        self.progress = Progress(started.budget, enabled=opts.progress)
        self.writer = (
            LLMProposer(
                llm,
                meter,
                session,
                task_source=started.task_source,
                target=started.target,
                edit_retries=started.config.edit_retries,
                reviser=started.config.reviser,
            )
            if llm is not None
            else None
        )
        self.tuner = TunerProposer(
            session,
            task_source=started.task_source,
            seed_code=started.seed_code,
            seed_outcome=started.seed_outcome,
            search_seed=opts.search_seed,
            compile_check=opts.compile_check,
        )

    async def explore(self, started_at: float) -> dict[str, Any]:
        """Run the loop from the first step; returns the summary (also written to summary.json)."""
        self.progress.message(self.started.message)
        try:
            stopped = await self.run_loop(self.started.step, self.started.note)
        except KernelcraftError as e:
            # The run stops saying which limit or fault stopped it; its steps so far are kept and
            # a rerun with the same --out resumes the tree (the open steps are re-offered).
            self.progress.done()
            what = "LLM error" if isinstance(e, LLMError) else type(e).__name__
            self.run.save_summary(self.summary(f"{what}: {e}", started_at))
            raise
        self.progress.done()
        summary = self.summary(stopped, started_at)
        summary["report"] = await write_run_report(self.session, self.run, self.tree_id, summary)
        self.run.save_summary(summary)
        self.progress.message(final_words(summary))
        return summary

    async def run_loop(self, step: NextStep | None, note: str | None) -> str:
        """Keep `--parallel` steps in flight: the first step and K-1 more (`another_step`), each a
        lane that writes, submits and takes the next step its submit returns. Lanes share the
        records, the best kernel and the meter; each LLM lane has its own writer (per-step usage)."""
        ends = await self._lanes(step, note)
        stopped = run_stop(ends)
        # Lanes end early when the rest of the budget is held by open steps. When every lane has
        # ended so, the open steps are held by no lane (a killed run's, resumed; a lease taken
        # outside a lane): the tree re-offers them one at a time, and the run goes on until its
        # budget is spent or a round evaluates nothing.
        used = -1
        while all(is_budget_held(e) for e in ends):
            status = await self.session.status(self.tree_id)
            if status.next_step is None or status.budget_used <= used:
                return status.next_step_note or stopped
            used = status.budget_used
            ends = await self._lanes(status.next_step, status.next_step_note)
            stopped = run_stop(ends)
        return stopped

    async def _lanes(self, step: NextStep | None, note: str | None) -> list[str]:
        """Run `step` and up to `--parallel` - 1 more steps at once; each lane's end."""
        if step is None or self.opts.parallel <= 1:
            return [await self._lane(step, note, self.writer)]
        steps = [step]
        while len(steps) < self.opts.parallel:
            extra = (await self.session.another_step(self.tree_id)).next_step
            if extra is None:  # the budget is spent or held by the steps already out
                break
            steps.append(extra)
        lanes = [
            asyncio.ensure_future(self._lane(s, note, self.writer if i == 0 else self._new_writer()))
            for i, s in enumerate(steps)
        ]
        try:
            return list(await asyncio.gather(*lanes))
        finally:
            for lane in lanes:
                lane.cancel()
            await asyncio.gather(*lanes, return_exceptions=True)

    async def _lane(self, step: NextStep | None, note: str | None, writer: LLMProposer | None) -> str:
        while step is not None:
            spent = self._budget_stop()
            if spent:
                return (
                    spent + f"; rerun with the same --out and a larger budget to continue tree {self.tree_id}"
                )
            done = self._search_stop()
            if done:
                return done
            self._show(len(self.records) + 1, f"{step.kind} step on node {step.parent_id}")
            result = await self.step_once(step, writer)
            self._show(len(self.records), f"node {result.node.id}: {result.node.outcome}")
            step, note = result.next_step, result.next_step_note
        return note or "the tree's budget is spent"

    def _new_writer(self) -> LLMProposer | None:
        if self.writer is None:
            return None
        w = self.writer
        return LLMProposer(
            w.llm,
            w.meter,
            w.session,
            task_source=w.task_source,
            target=w.target,
            edit_retries=w.edit_retries,
            reviser=w.reviser,
        )

    async def step_once(self, step: NextStep, writer: LLMProposer | None = None) -> SubmitResult:
        t0 = time.monotonic()
        writer = writer or self.writer
        if writer is not None:
            writer.begin_step()
        outcome, fallback = await self._write(step, writer)
        outcome.info["write_seconds"] = round(time.monotonic() - t0, 3)
        pending = {**outcome.info, "outcome": "pending"}
        self.pending.append(pending)
        try:
            return await self._submit(step, writer, outcome, fallback, t0)
        finally:
            self.pending.remove(pending)

    async def _submit(
        self,
        step: NextStep,
        writer: LLMProposer | None,
        outcome: StepOutcome,
        fallback: str | None,
        t0: float,
    ) -> SubmitResult:
        proposer: Proposer = "tuner" if outcome.info.get("mode") == "tuner" else "llm"
        if outcome.code is None:
            reason = outcome.driver_failure or "the step produced no candidate"
            result = await self.session.abandon(step.tree_id, step.node_id, reason)
        else:
            result = await self.session.submit(step.tree_id, step.node_id, outcome.code)
        node = result.node
        self.measured = step.speedup_measured
        record = self._record(step, outcome, proposer, fallback, result)
        if node.outcome != "correct":
            if node.failure_class:
                self.failures[node.failure_class.value] += 1
            # a failed tuner proposal is a bad configuration, not a lesson worth tokens
            if (
                writer is not None
                and outcome.code is not None
                and proposer == "llm"
                and self.config.learn_rules
                and learns_from(node)
            ):
                record["rule"] = await writer.propose_rule(outcome.code, node)
        record["seconds"] = round(time.monotonic() - t0, 3)
        record["usage"] = (writer.usage if writer is not None else Usage()).to_dict()
        record["usage_total"] = self.meter.total.to_dict()
        self.run.append_step(record)
        self.records.append(record)
        if result.new_best and outcome.code is not None:
            self._update_best(result.best or node, outcome.code)
            if self.opts.roofline_stop is not None and self.measured:
                # the new best is this node, whose verdict came back with it (a `status` here would
                # hand this client a step no lane writes, holding the budget for its lease)
                prof = node.verdict.profile if node.verdict is not None else None
                if prof is not None and prof.roofline_fraction is not None:
                    self.best_roofline = prof.roofline_fraction
                    record["roofline_fraction"] = round(prof.roofline_fraction, 4)
        return result

    async def _write(self, step: NextStep, writer: LLMProposer | None) -> tuple[StepOutcome, str | None]:
        """The step's candidate (or why none), and why the tuner gave a step back to the LLM."""
        if writer is None:
            return await self._tune(step), None
        if step.kind == "large":
            return await writer.large(step), None
        if small_proposer(step, self.tuner_steps, self.records) == "tuner":
            outcome = await self._tune(step)
            if outcome.code is None:  # nothing left to tune: the LLM writes the step after all
                return await writer.small(step), outcome.driver_failure
            return outcome, None
        return await writer.small(step), None

    async def _tune(self, step: NextStep) -> StepOutcome:
        """The tuner's proposal, one lane at a time: it sees the proposals still being evaluated
        (`pending`) as tried, so parallel lanes never propose the same configuration."""
        async with self._tuner_lock:
            return await self.tuner.step(step, self.records + self.pending, self.best_code)

    def _record(
        self,
        step: NextStep,
        outcome: StepOutcome,
        proposer: Proposer,
        fallback: str | None,
        result: SubmitResult,
    ) -> dict[str, Any]:
        """The step's line in steps.jsonl (its rule, time and usage are added by `step_once`)."""
        node = result.node
        return {
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
            "code_sha256": sha256_of(outcome.code) if outcome.code is not None else None,
        }

    def summary(self, stopped: str, started: float) -> dict[str, Any]:
        usage = self.meter.total.to_dict()
        correct = sum(1 for r in self.records if r.get("outcome") == "correct")
        best = self.best
        note = (
            None
            if self.measured
            else GPU_NOTE.format(
                compiled=f" and compiled for {self.target}" if self.tuner.compiled_any else ""
            )
        )
        return {
            "task": str(self.opts.task),
            "tree_id": self.tree_id,
            "server": self.session.where,
            "target": self.target,
            "llm": self.opts.llm.kind,
            "model": self.llm.model if self.llm is not None else None,
            "preset": self.config.preset,
            "seed_outcome": self.started.seed_outcome,  # the root's verdict; None: no seed
            "steps_done": len(self.records),
            "correct": correct,
            "failures_by_class": dict(self.failures),
            "driver_failures": sum(1 for r in self.records if r.get("driver_failure")),
            "steps_by_proposer": dict(Counter(r.get("proposer", r.get("mode")) for r in self.records)),
            "step_seconds": step_seconds(self.records),
            "tuner_axis_seconds": tuner_axis_seconds(self.records),
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

    def _show(self, step: int, note: str) -> None:
        self.progress.show(
            self.progress.line(
                step=step,
                best=self._best_label(),
                failures=dict(self.failures),
                tokens=self.meter.total.total_tokens,
                cost=self.meter.total.cost_usd,
                note=note,
            ),
            completed=len(self.records),
        )

    def _best_label(self) -> str:
        b = self.best
        if b is None:
            return "none correct yet"
        if b.speedup is not None and self.measured:
            return f"{b.speedup:.2f}x (node {b.id})"
        return f"correct, speed unmeasured (node {b.id})"

    def _update_best(self, best: NodeInfo, code: str) -> None:
        if best.outcome != "correct":
            return
        self.best = best
        self.best_code = code
        save_best(self.run, self.opts, self.tree_id, best, code, self.measured)

    def _search_stop(self) -> str | None:
        """KernelEvolve's stops, where asked for: `stall` steps in a row without a new best, or the
        best kernel at `roofline_stop` of the roofline (measured on a GPU only)."""
        n = self.opts.stall
        if n is not None and len(self.records) >= n and not any(r.get("new_best") for r in self.records[-n:]):
            return f"stalled: {n} steps in a row without a new best (--stall {n})"
        f = self.opts.roofline_stop
        if f is not None and self.best_roofline is not None and self.best_roofline >= f:
            return f"the best kernel runs at {self.best_roofline:.0%} of the roofline (--roofline-stop {f:g})"
        return None

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
