"""Selection policies of the search tree: which node to expand next, and with a small or a large step.

Everything here is a pure function over a `Snapshot`, an in-memory copy of one tree read inside
the transaction that issues the step, so each decision can be checked by hand.

The AdaExplore policy follows the paper's released code (`agent/mcts.py`, see
`reference/papers.md` §1 Stage 2):

- Reward: not compiled 0, compiled but wrong 0.05, correct: speedup clipped to [0.1, 10] mapped
  linearly onto [0.4, 1.6]. Without a GPU the speedup is unknown; a correct kernel then counts as
  parity (speedup 1.0, reward ≈ 0.509), so correct still beats wrong.
- Selection (the value is the mean reward; `reward_alpha` blends in the max, as AdaExplore's adapt
  run does with 1.0): from the root, descend by UCB1 = mean value + c·sqrt(ln N_parent / n) (c = 0.3; an
  unvisited child scores +inf); at each node compare with a virtual "expand" action scored
  max child mean + c_exp·sqrt(ln N / n_children²) (c_exp = 0.3; +inf with no child; no bonus
  while N = 0) and stop where expand wins strictly.
- Step kind: the root always gets a large step. Otherwise, when the node's latest step produced
  nothing (it was abandoned without a candidate, or its lease lapsed with nothing submitted) the
  other kind, as AdaExplore falls back to the other expansion; else large when the node has ≥ 2
  small children that produced a kernel (or are in flight), else large with probability 0.2.
  `kind_switch="failed"` also switches after a candidate that did not compile (an ablation; see
  `bench/bench_policy.py`).
- Context: a small step gets the chain from the nearest large-step ancestor to the node, the
  last 5 nodes; a large step gets the pool — the best correct kernel of each large-step branch
  (the large-step node and its small-step descendants) on the path to the root, at most 5,
  sampled with the tree's seeded generator when there are more.
- Ranking: the best kernel of a branch (pool), of a tree (its best node, the warm start) is the
  highest (compiled, correct, speedup), as AdaExplore's `MCTSNode.score`; the clipped reward, which
  ties every kernel above 10×, only steers selection.

Two departures, both forced by many clients writing one tree: a node whose step is in flight
(an open lease) is a child that cannot be descended into; it counts towards n_children of the
expand action and adds a virtual visit with reward 0 to every ancestor (virtual loss), so
concurrent clients spread out. A step abandoned without a candidate has no kernel to refine: it
counts as a failed child (reward 0, in the parent's visits) but is never descended into or
expanded. And the seed candidate is the root's first large-step child
(AdaExplore puts it on the root itself), so it is refined and enters the pool.

Greedy best-first and beam search implement the same `Policy` protocol. Every policy's
parameters are a `SearchConfig` (`kernelcraft.schema.presets`), started from a preset.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import ClassVar, Literal, Protocol

from pydantic import Field, ValidationError

from kernelcraft.base.errors import UsageError
from kernelcraft.base.failures import FailureClass
from kernelcraft.schema.evaluation import EvalResult
from kernelcraft.schema.presets import DEFAULT_PRESET, PRESET_NAMES, KindSwitch, SearchConfig, preset_values
from kernelcraft.schema.tree import Outcome, StepKind

REWARD_NOT_COMPILED = 0.0
REWARD_COMPILED_BUT_WRONG = 0.05
REWARD_MIN, REWARD_MAX = 0.4, 1.6
SPEEDUP_MIN, SPEEDUP_MAX = 0.1, 10.0
# A correct kernel whose speedup could not be measured (no GPU) is scored as parity.
UNKNOWN_SPEEDUP_AS = 1.0


# ---------------------------------------------------------------------------------------- reward


def reward_for(outcome: Outcome, speedup: float | None) -> float:
    """AdaExplore's reward: 0 not compiled, 0.05 wrong, correct → clip(speedup, 0.1, 10) onto [0.4, 1.6]."""
    if outcome == "not_compiled":
        return REWARD_NOT_COMPILED
    if outcome == "wrong":
        return REWARD_COMPILED_BUT_WRONG
    s = UNKNOWN_SPEEDUP_AS if speedup is None else min(max(speedup, SPEEDUP_MIN), SPEEDUP_MAX)
    return REWARD_MIN + (REWARD_MAX - REWARD_MIN) * (s - SPEEDUP_MIN) / (SPEEDUP_MAX - SPEEDUP_MIN)


def score(outcome: Outcome | None, speedup: float | None) -> tuple[bool, bool, float]:
    """AdaExplore's ranking key: (compiled, correct, speedup); an unmeasured speedup counts as parity."""
    if outcome != "correct":
        return outcome == "wrong", False, 0.0
    return True, True, UNKNOWN_SPEEDUP_AS if speedup is None else speedup


def outcome_of(
    result: EvalResult, baseline: Literal["eager", "compiled"] = "eager"
) -> tuple[Outcome, float | None]:
    """The outcome of an evaluation and the measured speedup against `baseline` (None if unmeasured)."""
    if result.verify is not None and result.verify.correct:
        speedup = None
        profile = result.profile
        if profile is not None and profile.available:
            speedup = profile.speedup_vs_eager if baseline == "eager" else profile.speedup_vs_compiled
        return "correct", speedup
    fc = result.failure_class
    if fc is None:
        # No stage named a failure class yet verify did not pass (or did not run): it compiled.
        compiled = result.compile is None or result.compile.ok
        return ("wrong" if compiled else "not_compiled"), None
    return ("wrong" if FailureClass(fc).compiled else "not_compiled"), None


def failure_text(result: EvalResult) -> str | None:
    """The error text (or, failing that, the one-sentence message) of the stage that failed."""
    for part in (result.compile, result.verify, result.profile):
        if part is None or part.failure_class is None:
            continue
        if part.evidence is not None:
            return part.evidence.error_text or part.evidence.message
    if result.compile is not None:
        for t in result.compile.targets:
            if not t.ok and t.error:
                return t.error
    return None


# -------------------------------------------------------------------------------------- snapshot


@dataclass
class SnapNode:
    """One node as the policy sees it. `in_flight`: pending with an open lease."""

    id: int
    parent_id: int | None
    kind: StepKind
    status: Literal["pending", "evaluated"] = "evaluated"
    in_flight: bool = False
    seed: bool = False
    abandoned: bool = False  # evaluated without a candidate: no code to refine
    outcome: Outcome | None = None
    speedup: float | None = None
    reward: float | None = None
    visits: int = 0
    value_sum: float = 0.0
    max_reward: float = 0.0
    children: list[int] = field(default_factory=list)

    @property
    def evaluated(self) -> bool:
        return self.status == "evaluated"

    @property
    def lapsed(self) -> bool:
        """Pending, and its lease expired: a step that produced nothing (so far)."""
        return self.status == "pending" and not self.in_flight

    @property
    def score(self) -> tuple[bool, bool, float]:
        return score(self.outcome, self.speedup)


class Snapshot:
    """An in-memory tree. Children are kept in id order (the order they were created)."""

    def __init__(self, nodes: list[SnapNode]) -> None:
        self.nodes: dict[int, SnapNode] = {}
        for n in sorted(nodes, key=lambda n: n.id):
            n.children = []
            self.nodes[n.id] = n
        roots = [n.id for n in self.nodes.values() if n.parent_id is None]
        if len(roots) != 1:
            raise ValueError(f"a tree has exactly one root, found {len(roots)}")
        self.root_id = roots[0]
        for n in self.nodes.values():
            if n.parent_id is not None:
                self.nodes[n.parent_id].children.append(n.id)
        # Virtual loss: each in-flight node adds one visit of reward 0 to every ancestor.
        self.inflight_below: dict[int, int] = dict.fromkeys(self.nodes, 0)
        for n in self.nodes.values():
            if n.in_flight:
                for a in self.path_to_root(n.id)[:-1]:
                    self.inflight_below[a] += 1

    def __getitem__(self, node_id: int) -> SnapNode:
        return self.nodes[node_id]

    def path_to_root(self, node_id: int) -> list[int]:
        """Root first, `node_id` last."""
        path = [node_id]
        while (parent := self.nodes[path[-1]].parent_id) is not None:
            path.append(parent)
        return path[::-1]

    def visits(self, node_id: int) -> int:
        """Visits including virtual ones for steps in flight below the node."""
        return self.nodes[node_id].visits + self.inflight_below[node_id]

    def mean(self, node_id: int) -> float:
        v = self.visits(node_id)
        return self.nodes[node_id].value_sum / v if v else 0.0

    def value(self, node_id: int, alpha: float = 0.0) -> float:
        """AdaExplore's blended reward: alpha × max reward + (1 − alpha) × mean (alpha 0: the mean)."""
        if alpha == 0.0:
            return self.mean(node_id)
        return alpha * self.nodes[node_id].max_reward + (1 - alpha) * self.mean(node_id)

    def evaluated_children(self, node_id: int) -> list[int]:
        """Children with a kernel and a verdict: those selection may descend into."""
        return [
            c for c in self.nodes[node_id].children if self.nodes[c].evaluated and not self.nodes[c].abandoned
        ]

    def live_children(self, node_id: int) -> list[int]:
        """Evaluated children and those in flight; lapsed steps are not children any more."""
        return [c for c in self.nodes[node_id].children if not self.nodes[c].lapsed]

    def evaluated(self) -> list[SnapNode]:
        """Evaluated kernels (abandoned steps have none)."""
        return [n for n in self.nodes.values() if n.evaluated and n.kind != "root" and not n.abandoned]


# --------------------------------------------------------------------------------- AdaExplore math


def ucb1(snap: Snapshot, node_id: int, c: float, alpha: float = 0.0) -> float:
    """value + c·sqrt(ln N_parent / n), value the mean (alpha 0) or blended with the max reward;
    +inf when unvisited; no bonus while the parent is unvisited."""
    n = snap.visits(node_id)
    if n == 0:
        return math.inf
    parent = snap[node_id].parent_id
    exploit = snap.value(node_id, alpha)
    if parent is None or snap.visits(parent) == 0:
        return exploit
    return exploit + c * math.sqrt(math.log(snap.visits(parent)) / n)


def expand_score(snap: Snapshot, node_id: int, c_exp: float, alpha: float = 0.0) -> float:
    """The virtual expand action: max child value + c_exp·sqrt(ln N / n_children²)."""
    live = snap.live_children(node_id)
    if not live:
        return math.inf
    if c_exp <= 0:
        return -math.inf
    evaluated = [ch for ch in live if snap[ch].evaluated]
    q = max((snap.value(ch, alpha) for ch in evaluated), default=0.0)
    n_visits = snap.visits(node_id)
    if n_visits == 0:
        return q
    return q + c_exp * math.sqrt(math.log(n_visits) / len(live) ** 2)


def select_node(snap: Snapshot, c: float, c_exp: float, alpha: float = 0.0) -> int:
    """Descend from the root by UCB1 until the expand action wins (or no child can be entered)."""
    node = snap.root_id
    while True:
        children = snap.evaluated_children(node)
        if not children:
            return node
        # max() keeps the first of equal scores: the earliest child wins ties.
        best = max(children, key=lambda ch: ucb1(snap, ch, c, alpha))
        if expand_score(snap, node, c_exp, alpha) > ucb1(snap, best, c, alpha):
            return node
        node = best


def latest_step_failed(
    snap: Snapshot, node_id: int, kind_switch: KindSwitch = "no_candidate"
) -> SnapNode | None:
    """The node's most recent finished step if it failed in the way `kind_switch` names: produced
    nothing (abandoned, or lapsed unsubmitted), or with "failed" also a candidate that did not compile."""
    finished = [snap[c] for c in snap[node_id].children if not snap[c].in_flight]
    if not finished:
        return None
    last = finished[-1]
    if last.lapsed or last.abandoned:
        return last
    if kind_switch == "failed" and last.outcome == "not_compiled":
        return last
    return None


def choose_kind(
    snap: Snapshot,
    node_id: int,
    rng: random.Random,
    *,
    p_large: float,
    small_step_limit: int,
    kind_switch: KindSwitch = "no_candidate",
) -> tuple[Literal["large", "small"], str]:
    """Small or large step for `node_id`, with the reason in words.

    The random draw is taken on every call (even when a rule decides) so that a decision never
    shifts the generator of a later one.
    """
    draw = rng.random()
    node = snap[node_id]
    if node.kind == "root":
        return "large", "the root always gets a large step"
    failed = latest_step_failed(snap, node_id, kind_switch)
    if failed is not None and failed.kind in ("large", "small"):
        other: Literal["large", "small"] = "small" if failed.kind == "large" else "large"
        if failed.lapsed:
            why = "its lease lapsed with nothing submitted"
        elif failed.abandoned:
            why = "it was abandoned without a candidate"
        else:
            why = "its kernel did not compile"
        return other, f"the last {failed.kind} step from node {node_id} failed ({why}): trying a {other} step"
    # A step that produced nothing is no child in AdaExplore: only kernels (and steps in flight) count.
    small = sum(1 for c in snap.live_children(node_id) if snap[c].kind == "small" and not snap[c].abandoned)
    if small >= small_step_limit:
        return "large", f"node {node_id} already has {small} small-step children (limit {small_step_limit})"
    if draw < p_large:
        return "large", f"random draw {draw:.3f} < p_large {p_large}"
    return "small", f"random draw {draw:.3f} ≥ p_large {p_large}"


# ------------------------------------------------------------------------------------- contexts


def small_chain(snap: Snapshot, node_id: int, memory: int) -> list[int]:
    """The path from the nearest large-step ancestor (inclusive) down to `node_id`, last `memory`."""
    path = [node_id]
    while snap[path[-1]].kind != "large" and snap[path[-1]].parent_id is not None:
        path.append(snap[path[-1]].parent_id)  # type: ignore[arg-type]
    path = [n for n in path[::-1] if snap[n].kind != "root"]
    return path[-memory:]


def branch_component(snap: Snapshot, large_id: int) -> list[int]:
    """A large-step node and every node reachable from it through small-step edges."""
    out, queue = [], [large_id]
    while queue:
        n = queue.pop(0)
        out.append(n)
        queue.extend(c for c in snap[n].children if snap[c].kind == "small")
    return out


def large_pool(snap: Snapshot, node_id: int, pool_size: int, rng: random.Random) -> list[int]:
    """The best correct kernel of each large-step branch on the path to the root, at most `pool_size`.

    Best = highest (compiled, correct, speedup), earliest on ties. With more branches than
    `pool_size`, a seeded random sample (as AdaExplore), kept in path order.
    """
    picked = []
    for n in snap.path_to_root(node_id):
        if snap[n].kind != "large":
            continue
        correct = [snap[m] for m in branch_component(snap, n) if snap[m].outcome == "correct"]
        if correct:
            picked.append(max(correct, key=lambda m: (m.score, -m.id)).id)
    if len(picked) > pool_size:
        keep = set(rng.sample(picked, pool_size))
        picked = [p for p in picked if p in keep]
    return picked


# ------------------------------------------------------------------------------------- policies


class GreedyParams(SearchConfig):
    max_children: int = Field(default=2, ge=1, description="Refinements of one node before the next best.")


class BeamParams(SearchConfig):
    width: int = Field(default=4, ge=1, description="Kernels kept in the beam (and first drafts written).")
    max_children: int = Field(default=2, ge=1, description="Refinements of one beam member.")


@dataclass(frozen=True)
class Decision:
    parent_id: int
    kind: Literal["large", "small"]
    reason: str


class Policy(Protocol):
    """Decides the next step of a tree from its snapshot. `rng` is seeded per tree and step."""

    name: ClassVar[str]
    params: SearchConfig

    def decide(self, snap: Snapshot, rng: random.Random) -> Decision: ...


@dataclass
class AdaExplore:
    params: SearchConfig
    name: ClassVar[str] = "adaexplore"

    def decide(self, snap: Snapshot, rng: random.Random) -> Decision:
        p = self.params
        node = select_node(snap, p.c, p.c_exp, p.reward_alpha)
        kind, why = choose_kind(
            snap,
            node,
            rng,
            p_large=p.p_large,
            small_step_limit=p.small_step_limit,
            kind_switch=p.kind_switch,
        )
        return Decision(node, kind, f"UCB1 selected node {node}; {why}")


def _negated(key: tuple[bool, bool, float]) -> tuple[int, int, float]:
    return -int(key[0]), -int(key[1]), -key[2]


def _refinable(snap: Snapshot, limit: int) -> list[SnapNode]:
    return [n for n in snap.evaluated() if len(snap.live_children(n.id)) < limit]


@dataclass
class Greedy:
    """Best-first: refine the best kernel that has room; a new draft from the root when none has."""

    params: GreedyParams
    name: ClassVar[str] = "greedy"

    def decide(self, snap: Snapshot, rng: random.Random) -> Decision:
        room = _refinable(snap, self.params.max_children)
        if not room:
            return Decision(
                snap.root_id, "large", "no evaluated kernel has room for a refinement: a new draft"
            )
        best = max(room, key=lambda n: (n.score, -n.id))
        return Decision(
            best.id, "small", f"node {best.id} is the best kernel with room (reward {best.reward:.3f})"
        )


@dataclass
class Beam:
    """Draft `width` kernels, then refine the top `width` by score, the least-expanded first."""

    params: BeamParams
    name: ClassVar[str] = "beam"

    def decide(self, snap: Snapshot, rng: random.Random) -> Decision:
        p = self.params
        drafts = [c for c in snap.live_children(snap.root_id) if snap[c].kind == "large"]
        if len(drafts) < p.width:
            return Decision(snap.root_id, "large", f"draft {len(drafts) + 1} of {p.width}")
        beam = sorted(snap.evaluated(), key=lambda n: (_negated(n.score), n.id))[: p.width]
        room = [n for n in beam if len(snap.live_children(n.id)) < p.max_children]
        if not room:
            return Decision(snap.root_id, "large", "every kernel in the beam has been refined: a new draft")
        pick = min(room, key=lambda n: (len(snap.live_children(n.id)), -(n.reward or 0.0), n.id))
        return Decision(pick.id, "small", f"node {pick.id} is in the beam (reward {pick.reward:.3f})")


POLICIES: dict[str, tuple[type[SearchConfig], type]] = {
    "adaexplore": (SearchConfig, AdaExplore),
    "greedy": (GreedyParams, Greedy),
    "beam": (BeamParams, Beam),
}


def make_policy(name: str, params: dict[str, object] | None = None) -> Policy:
    """The policy `name` with `params` validated (missing keys take `SearchConfig`'s defaults, the
    kernelcraft preset); a UsageError names what is allowed."""
    if name not in POLICIES:
        raise UsageError(f"unknown policy {name!r}; use one of: {', '.join(POLICIES)}")
    params_cls, policy_cls = POLICIES[name]
    try:
        parsed = params_cls.model_validate(params or {})
    except ValidationError as e:
        allowed = ", ".join(params_cls.model_fields)
        problems = "; ".join(f"{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in e.errors())
        raise UsageError(f"bad parameters for policy {name!r} ({problems}); allowed keys: {allowed}") from e
    policy: Policy = policy_cls(parsed)
    return policy


def start_policy(name: str, preset: str | None, params: dict[str, object] | None = None) -> Policy:
    """A new tree's policy: the preset's values (for the task's `level` among `params`), then
    `params` on top. A UsageError names an unknown preset, policy or parameter."""
    chosen = next((p for p in PRESET_NAMES if p == (preset or DEFAULT_PRESET)), None)
    if chosen is None:
        raise UsageError(f"unknown preset {preset!r}; use one of: {', '.join(PRESET_NAMES)}")
    given = dict(params or {})
    if "preset" in given and given["preset"] != chosen:
        raise UsageError(f"the preset is {chosen!r} but params say {given['preset']!r}; pass it once")
    level = given.get("level", 0)
    if not isinstance(level, int) or isinstance(level, bool) or not 0 <= level <= 3:
        raise UsageError(f"level must be a KernelBench level 1, 2 or 3 (0: none), got {level!r}")
    values: dict[str, object] = dict(preset_values(chosen, level))
    values.update(given)
    return make_policy(name, values)


def step_rng(seed: int, step_index: int) -> random.Random:
    """The generator of one step: the same tree seed and step index always draw the same numbers."""
    return random.Random(f"{seed}:{step_index}")
