"""Who writes a step's candidate: the LLM (`LLMProposer`) or the offline tuner (`TunerProposer`).

Each takes the server's `NextStep` and returns a `StepOutcome`: a candidate module, or why the
step produced none (the explore loop then abandons the step with that reason). `StepOutcome.info`
is what the step's record in `steps.jsonl` keeps about how the candidate was written.

- LLM, large step: one call (`submit_kernel`) writing a whole ModelNew that must beat the pool.
- LLM, small step: a reviser call (`propose_improvements`; skipped when no kernel of the chain is
  correct) and a tuner call (`submit_edits`) whose edits are applied to the parent, with the tree's
  `edit_retries` retries that show the model why its edits did not apply; after the last, the
  edits that apply are kept and the rest skipped, as AdaExplore's `str_replace` does, so a step
  whose edits all miss evaluates the unchanged kernel rather than failing.
- LLM, after a failed candidate: `propose_rule` and `record_failure` with the rule.
- Tuner: the next configuration of the kernel's launch parameters (a distant one for a large
  step), from what the run and the tree's context have tried; without a GPU each proposal is
  compiled for the target first, and one that does not compile is recorded and replaced; one that
  moves a branch's value or a cap and launches on the task's shapes exactly what its base launches
  is skipped (`same_launches`), on a GPU too.
"""

from __future__ import annotations

import ast
import hashlib
import json
import logging
from dataclasses import dataclass, field
from typing import Any

from kernelcraft.agent.llm import prompts
from kernelcraft.agent.llm.core import ANSWER_TOOLS, LLM, Message, Usage, UsageMeter
from kernelcraft.agent.loop.cookbook_seed import cookbook_seed
from kernelcraft.agent.loop.edits import Edit, EditError, apply_edits, apply_what_applies, parse_edits
from kernelcraft.agent.loop.session import ToolSession
from kernelcraft.agent.tuner.family import kernel_family
from kernelcraft.agent.tuner.search import (
    SHARED_LIMIT_BYTES,
    Observation,
    Space,
    apply_config,
    current_config,
    family_of,
    find_params,
    next_config,
)
from kernelcraft.agent.tuner.source import Param
from kernelcraft.schema.evaluation import CompileResult
from kernelcraft.schema.tree import ContextKernel, NextStep, NodeInfo

logger = logging.getLogger(__name__)

PRECHECK_TRIES = 4
UNCHANGED_TRIES = 16  # proposals skipped for launching what their base does, per step
NO_KERNEL = "the model returned no kernel module (no submit_kernel call with a ModelNew)"

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


# The tuner's guidance when the reviser is off, word for word AdaExplore's (agent/actions.py:42).
NO_REVISER_GUIDANCE = (
    "Please fix or improve the performance of the custom kernels based on the execution logs."
)


class LLMProposer:
    """The LLM's steps and rules. `usage` holds the tokens of the current step (`begin_step`)."""

    def __init__(
        self,
        llm: LLM,
        meter: UsageMeter,
        session: ToolSession,
        *,
        task_source: str,
        target: str,
        edit_retries: int,
        reviser: bool = True,
    ) -> None:
        self.llm = llm
        self.meter = meter
        self.session = session
        self.task_source = task_source
        self.target = target
        self.edit_retries = edit_retries
        self.reviser = reviser
        self.usage = Usage()
        self._example: str | None | bool = False  # False: not looked up yet

    def begin_step(self) -> None:
        self.usage = Usage()

    async def ask(self, prompt: str, tool: str) -> dict[str, Any] | None:
        reply = await self.llm.call(prompts.SYSTEM, [Message("user", prompt)], list(ANSWER_TOOLS), tool)
        self.meter.add(reply.usage)
        self.usage.add(reply.usage)
        if reply.tool_call is None:
            logger.warning("the model answered without calling %s: %s", tool, reply.text[:200])
            return None
        return reply.tool_call.input

    async def example(self) -> str | None:
        """The cookbook kernel nearest the task, from the server's `search_examples` (looked up
        once per run; the agent reaches the knowledge layer only over MCP), or None."""
        if self._example is False:
            self._example = None
            try:
                found = await cookbook_seed(self.session, self.task_source)
                self._example = found.kernel_code if found is not None and found.kernel_code else None
            except Exception as e:  # noqa: BLE001 - an example helps; its absence is no failure
                logger.info("no cookbook example for the prompts: %s", e)
        return self._example if isinstance(self._example, str) else None

    async def large(self, step: NextStep) -> StepOutcome:
        answer = await self.ask(prompts.large_step(step, await self.example()), "submit_kernel")
        code = answer.get("code") if answer else None
        if not isinstance(code, str) or "ModelNew" not in code:
            return StepOutcome.failed(NO_KERNEL, {"mode": "llm"})
        return StepOutcome(code, {"mode": "llm", "notes": (answer or {}).get("notes")})

    async def small(self, step: NextStep) -> StepOutcome:
        parent = step.start_code or ""
        if is_failed_step(parent):
            return await self._rewrite_failed_step(step)
        improvements = await self._improvements(step)
        reason: str | None = None
        edits: list[Edit] = []
        for _ in range(1 + self.edit_retries):
            answer = await self.ask(prompts.tuner(step, improvements, reason), "submit_edits")
            try:
                edits = parse_edits(answer.get("edits") if answer else None)
                code = apply_edits(parent, edits)
            except EditError as e:
                reason = str(e)
                continue
            return StepOutcome(code, {"mode": "llm", "improvements": improvements, "edits": len(edits)})
        # AdaExplore's str_replace: what applies is applied, the rest skipped; with nothing, the
        # unchanged kernel is evaluated (its verdict is a result, a reward of 0 would not be).
        code, skipped = apply_what_applies(parent, edits)
        if not edits and reason is not None:
            skipped = [reason]
        info = {"mode": "llm", "improvements": improvements, "edits": len(edits), "skipped_edits": skipped}
        if code == parent:
            info["unchanged"] = True
        return StepOutcome(code, info)

    async def _rewrite_failed_step(self, step: NextStep) -> StepOutcome:
        """Nothing to refine: the node is a step that produced no kernel; write one instead."""
        prompt = (
            prompts.large_step(step)
            + "\n\nThe kernel in start_code is a placeholder for a step that produced nothing: "
            "ignore it and write a complete, correct kernel for the task."
        )
        answer = await self.ask(prompt, "submit_kernel")
        code = answer.get("code") if answer else None
        if not isinstance(code, str) or "ModelNew" not in code:
            return StepOutcome.failed(NO_KERNEL, {"mode": "llm"})
        return StepOutcome(code, {"mode": "llm", "rewrote_failed_step": True})

    async def _improvements(self, step: NextStep) -> list[str]:
        """The reviser's 1-3 changes, or the fix of the chain's failure when none of it is correct."""
        if not self.reviser:  # the tree's `reviser` off (AdaExplore's adapt: disable_reviewer)
            return [NO_REVISER_GUIDANCE]
        if step.chain and all(k.outcome != "correct" for k in step.chain):
            last = step.chain[-1]
            return [f"Fix the failure of the current kernel: {prompts.describe_kernel(last)[:1500]}"]
        answer = await self.ask(prompts.reviser(step), "propose_improvements")
        items = answer.get("items") if answer else None
        improvements = [str(i) for i in items][:3] if isinstance(items, list) and items else []
        return improvements or ["Make the kernel faster with one concrete change, keeping it correct."]

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
            arch=self.target,
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


def axes_changed(params: list[Param], start: dict[str, int], config: dict[str, int]) -> list[str]:
    """The axes a proposal moves along (each param's `axis`: 'tile M', 'block', 'warps', 'stages',
    'split-K', 'precision', 'rows per program', ...), those that matter most for the kernel's
    family first."""
    by_key = {p.key: p for p in params}
    moved = {by_key[k].axis: by_key[k].rank for k, v in config.items() if k in by_key and v != start.get(k)}
    return sorted(moved, key=lambda axis: (moved[axis], axis))


def base_time(step: NextStep, base: str | None) -> float | None:
    """The time (µs) of the kernel a proposal starts from, where the tree has timed it: a small
    step's parent, or the pool kernel a jump starts from. None without a GPU."""
    for k in [*step.chain, *step.pool]:
        parent = step.kind == "small" and k.node_id == step.parent_id
        if k.candidate_us is not None and (parent or (k.code is not None and k.code == base)):
            return k.candidate_us
    return None


class TunerProposer:
    """The offline tuner's steps: configurations of a kernel's launch parameters, at no token cost.

    `compiled_any` says whether a proposal was compiled for the target (no GPU here), for the
    run's summary.
    """

    def __init__(
        self,
        session: ToolSession,
        *,
        task_source: str,
        seed_code: str | None,
        seed_outcome: str | None,
        search_seed: int,
        compile_check: bool,
    ) -> None:
        self.session = session
        self.task_source = task_source
        self.seed_code = seed_code
        self.seed_outcome = seed_outcome
        self.search_seed = search_seed
        self.compile_check = compile_check
        self.compiled_any = False
        self._launches: dict[str, list[str] | None] = {}  # a base kernel's launch fingerprint, by sha256
        self.cookbook: tuple[str, str] | None = None
        """(entry id, kernel) of the cookbook's match, submitted as the run's first tuner step."""

    def observations(self, family: str, records: list[dict[str, Any]]) -> list[Observation]:
        """What the run's earlier tuner steps (and their rejected proposals) tried in this family."""
        obs: list[Observation] = []
        for r in records:
            obs.extend(
                Observation(rej["config"], ok=False, failure_class=rej.get("failure_class"))
                for rej in r.get("rejected", [])
                if rej.get("family") == family
            )
            obs.extend(  # launched what its base did: tried, nothing to time
                Observation(same["config"], ok=True)
                for same in r.get("same_launches") or []
                if isinstance(same, dict) and same.get("family") == family
            )
            t = r.get("tuner")
            if t and t.get("family") == family:
                obs.append(
                    Observation(
                        t["config"],
                        # a proposal still being evaluated (--parallel) counts as tried, presumed fine
                        ok=r.get("outcome") in ("correct", "pending"),
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
            (k.code or "", k.outcome == "correct", k.candidate_us) for k in [*step.chain, *step.pool]
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

    def pool_base(self, pool: list[ContextKernel], best_code: str | None) -> str | None:
        """The kernel a jump starts from: the pool's fastest correct one, else the run's best, else the seed."""
        correct = [k for k in pool if k.outcome == "correct"]
        if correct:
            return max(correct, key=lambda k: k.speedup or 0.0).code
        return best_code or self.seed_code

    async def step(self, step: NextStep, records: list[dict[str, Any]], best_code: str | None) -> StepOutcome:
        if self.cookbook is not None and not any(r.get("cookbook") for r in records):
            entry, code = self.cookbook
            self.cookbook = None  # once per run: the tree then tunes whichever kernel is faster
            if code != self.seed_code:
                first: dict[str, Any] = {"mode": "tuner", "cookbook": entry}
                if (seed_us := base_time(step, step.start_code)) is not None:
                    first["base_us"] = seed_us
                if not (self.compile_check and not step.speedup_measured):
                    return StepOutcome(code, first)
                # compiled for the target first, as every tuner proposal is without a GPU
                compiled = await self.session.compile(self.task_source, code, [step.target])
                self.compiled_any = True
                if compiled.ok:
                    return StepOutcome(code, first)
        jump = step.kind == "large"
        base = self.pool_base(step.pool, best_code) if jump else step.start_code
        if is_failed_step(base):  # a step that produced nothing: tune the best kernel instead
            base, jump = self.pool_base([], best_code), True
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
        kind = kernel_family(ast.parse(base))
        space = Space.of(params)
        start = current_config(params)
        obs = self.observations(family, records) + self.context_observations(family, step)
        rejected: list[dict[str, Any]] = []
        unchanged: list[dict[str, Any]] = []  # proposals that change no launch the task makes
        while len(rejected) < PRECHECK_TRIES:
            config = next_config(space, start, obs, seed=self.search_seed, jump=jump)
            if config is None:
                reason = "the offline tuner has tried every allowed configuration of this kernel"
                return StepOutcome.failed(
                    reason, {"mode": "tuner", "rejected": rejected, "same_launches": unchanged}
                )
            code = apply_config(base, params, config)
            info: dict[str, Any] = {
                "mode": "tuner",
                "tuner": {
                    "family": family,
                    "op_family": kind,
                    "config": config,
                    "changed": {k: [start[k], v] for k, v in config.items() if v != start[k]},
                    "axes": axes_changed(params, start, config),
                    "base_us": base_time(step, base),
                },
                "rejected": rejected,
                "same_launches": unchanged,
            }
            precheck = self.compile_check and not step.speedup_measured
            may_be_dead = len(unchanged) < UNCHANGED_TRIES and any(
                p.alone for p in params if config.get(p.key, p.value) != p.value
            )
            checked: CompileResult | None = None
            if precheck or may_be_dead:
                checked = await self.session.compile(self.task_source, code, [step.target])
                self.compiled_any = True
            if precheck and checked is not None:
                failure_class = await self._precheck(step, code, info, checked)
                if failure_class is not None:
                    rejected.append({"family": family, "config": config, "failure_class": failure_class})
                    obs.append(Observation(config, ok=False, failure_class=failure_class))
                    continue
            if may_be_dead and checked is not None and await self._same_launches(step, base, checked):
                unchanged.append({"family": family, "config": config, "axes": info["tuner"]["axes"]})
                obs.append(Observation(config, ok=True))
                continue
            return StepOutcome(code, info)
        reason = f"{PRECHECK_TRIES} tuner proposals in a row failed to compile for {step.target}"
        return StepOutcome.failed(reason, {"mode": "tuner", "rejected": rejected, "same_launches": unchanged})

    async def _same_launches(self, step: NextStep, base: str, compiled: CompileResult) -> bool:
        """Whether a proposal launches exactly what the kernel it starts from launches on the task's
        inputs (each kernel's constexprs, warps, stages and grid): a change to a branch the task's
        shapes never take (`if inner == 1:` for a reduction over a middle dimension) is no step."""
        key = sha256_text(base)
        if key not in self._launches:
            found = await self.session.compile(self.task_source, base, [step.target])
            self._launches[key] = launch_fingerprint(found) if found.ok else None
        before = self._launches[key]
        return before is not None and bool(compiled.launches) and launch_fingerprint(compiled) == before

    async def _precheck(
        self, step: NextStep, code: str, info: dict[str, Any], compiled: CompileResult
    ) -> str | None:
        """A proposal compiled for the target (no GPU to time it here): its shared memory goes into
        `info`; one that did not compile is recorded as a failure and its class returned."""
        info["tuner"]["shared_fraction"] = shared_fraction(compiled, step.target)
        if compiled.ok:
            return None
        cls = compiled.failure_class.value if compiled.failure_class else "compile_error"
        error = next((t.error for t in compiled.targets if t.error), None) or cls
        await self.session.record_failure(
            code,
            error,
            reference_code=self.task_source,
            arch=step.target,
            rule=None,
            failure_class=compiled.failure_class,
        )
        return cls


def launch_fingerprint(compiled: CompileResult) -> list[str]:
    """What a candidate launches on the task's inputs, as `compile_kernel` found it: each launch's
    kernel, constexprs, warps, stages and grid."""
    return [
        json.dumps([k.name, k.constexprs, k.num_warps, k.num_stages, k.grid], sort_keys=True, default=str)
        for k in compiled.launches
    ]


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
