"""Ablations of the search's configuration, replayed on recorded H200 verdicts (no LLM, no GPU).

    python bench/bench_policy.py                       # every example, 100 tree seeds, budget 20
    python bench/bench_policy.py --seeds 0 1 2 --budget 12 --examples elementwise matmul_epilogue
    python bench/bench_policy.py --json results.json   # every run, for the record

What runs: the real `SearchService` (policy, SQLite, leases, back-propagation) over a recorded
landscape per example: every launch configuration of its seed kernel that was measured on the H200
(`docs/results/bench_tuner_h200*.json`: exhaustive grids timed with `do_bench`) or evaluated there by
`optimize --llm none` (`docs/results/optimize_h200/*.steps.jsonl`: the engine's verdicts, among them
the configurations that did not compile). A `RecordedEvaluator` answers each candidate from that
record, so a verdict here is the verdict the H200 gave.

The scripted proposer stands in for the LLM, with the two moves of AdaExplore's steps: a small step
changes one launch parameter of the kernel it refines (a recorded neighbour not yet tried in the
tree), a large step writes a new design (a recorded configuration not yet tried, anywhere in the
landscape). Its choices come from a generator seeded by the tree seed and step index, so a run
replays exactly. When it has nothing left to propose it abandons the step, as a model that writes
nothing does (a step that produced nothing).

Variants (tree parameters over the `kernelcraft` preset; the `adaexplore` preset's tree is the same,
and what the presets differ in — manual sections, profiles, warm start, the offline tuner's turns —
reaches only a model, which this proposer is not; warm start is off for every variant):

- `paper`: AdaExplore's rules (switch kind only after a step that produced nothing; c_exp 0.3).
- `switch_on_failure`: the kind also switches after a candidate that did not compile (the rule
  kernelcraft had, deviation 1 of issue 17).
- `c_exp_0.15`: the expand action's weight AdaExplore uses on KernelBench level 3 (deviation 7).

Reported per example and variant, over the tree seeds: the best speedup found within the budget as
a fraction of the landscape's best (mean), how often the search got within 3% of it, the median
number of steps that took (0: the seed already was), and the steps that did not compile or were
abandoned. Then, per variant, the mean difference from `paper` paired by tree seed with a 95%
bootstrap interval: a variant is better or worse than `paper` on an example only where that
interval excludes 0; otherwise the seeds show no difference, and no claim is made.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kernelcraft.agent.tuner.params import launch_params  # noqa: E402
from kernelcraft.agent.tuner.search import Config, apply_config, config_key, current_config  # noqa: E402
from kernelcraft.base.failures import FailureClass  # noqa: E402
from kernelcraft.engine.host.evaluator import ProgressCallback  # noqa: E402
from kernelcraft.knowledge.rulebook import Rulebook  # noqa: E402
from kernelcraft.schema.evaluation import (  # noqa: E402
    CompileResult,
    EvalJob,
    EvalResult,
    Evidence,
    ProfileResult,
    Timing,
    VerifyResult,
)
from kernelcraft.schema.tree import NextStep  # noqa: E402
from kernelcraft.search.service import SearchService  # noqa: E402
from kernelcraft.store import Store  # noqa: E402

RESULTS = ROOT / "docs" / "results"
GRIDS = [RESULTS / "bench_tuner_h200.json", RESULTS / "bench_tuner_h200_matmul_epilogue.json"]
STEP_LOGS = sorted((RESULTS / "optimize_h200").glob("*.steps.jsonl"))
VARIANTS: dict[str, dict[str, Any]] = {
    "paper": {},
    "switch_on_failure": {"kind_switch": "failed"},
    "c_exp_0.15": {"c_exp": 0.15},
}
WITHIN = 0.03  # "found the best": within 3% of the landscape's best speedup, as the tuner's claim


@dataclass(frozen=True)
class Verdict:
    speedup: float | None  # None: did not compile
    failure_class: str | None = None


@dataclass
class Landscape:
    example: str
    task: str
    seed: str
    verdicts: dict[str, Verdict] = field(default_factory=dict)
    configs: dict[str, Config] = field(default_factory=dict)

    @property
    def best(self) -> float:
        return max(v.speedup for v in self.verdicts.values() if v.speedup is not None)

    def add(self, config: Config, verdict: Verdict) -> None:
        key = config_key(config)
        self.configs.setdefault(key, config)
        self.verdicts.setdefault(key, verdict)  # the grid's do_bench timing wins over a run's


def load_landscapes(names: list[str] | None) -> list[Landscape]:
    """Every example with a recorded grid (and its optimize runs' verdicts), or those `names`."""
    out: dict[str, Landscape] = {}
    for path in GRIDS:
        for row in json.loads(path.read_text())["rows"]:
            name = row["example"]
            folder = ROOT / "examples" / name
            land = out.setdefault(
                name, Landscape(name, (folder / "task.py").read_text(), (folder / "seed.py").read_text())
            )
            for config, us, error in row["grid"]:
                if us is not None and error is None:
                    land.add(config, Verdict(row["eager_us"] / us))
    for path in STEP_LOGS:
        name = next((n for n in out if path.name.startswith(n)), None)
        if name is None:
            continue
        for line in path.read_text().splitlines():
            step = json.loads(line)
            tuned = step.get("tuner") or {}
            if "config" not in tuned or step.get("outcome") not in ("correct", "not_compiled"):
                continue
            if step["outcome"] == "correct" and step.get("speedup"):
                out[name].add(tuned["config"], Verdict(step["speedup"]))
            elif step["outcome"] == "not_compiled":
                out[name].add(tuned["config"], Verdict(None, step.get("failure_class") or "compile_error"))
    chosen = [out[n] for n in (names or sorted(out))]
    # A landscape of one configuration leaves nothing to search.
    return [land for land in chosen if len(land.verdicts) > 1]


class RecordedEvaluator:
    """The Evaluator protocol answered from a landscape: the verdict the H200 gave that config."""

    has_gpu = True

    def __init__(self, land: Landscape) -> None:
        self.land = land

    async def submit(self, job: EvalJob, progress: ProgressCallback | None = None) -> EvalResult:
        verdict = self.land.verdicts[config_key(current_config(launch_params(job.candidate_source)))]
        if verdict.speedup is None:
            cls = FailureClass(verdict.failure_class or "compile_error")
            evidence = Evidence(message="recorded: did not compile on the H200", error_text=cls.value)
            return EvalResult(compile=CompileResult(ok=False, failure_class=cls, evidence=evidence))
        verify = VerifyResult(
            correct=True,
            status="passed",
            trials=job.trials,
            trials_passed=job.trials,
            device="cuda:0 (recorded)",
            interpreter=False,
        )
        us = 100.0 / verdict.speedup
        timing = Timing(median_us=us, iqr_us=0.0, min_us=us, reps=1, method="cuda_events")
        profile = ProfileResult(available=True, candidate=timing, speedup_vs_eager=verdict.speedup)
        return EvalResult(compile=CompileResult(ok=True), verify=verify, profile=profile)

    async def aclose(self) -> None:
        return None


class ScriptedProposer:
    """AdaExplore's two moves over the recorded configurations, seeded per tree and step."""

    def __init__(self, land: Landscape, seed: int) -> None:
        self.land = land
        self.seed = seed
        self.params = launch_params(land.seed)
        self.tried = {config_key(current_config(self.params))}

    def propose(self, step: NextStep) -> str | None:
        """A candidate for the step, or None when there is nothing left to try (abandon it)."""
        rng = random.Random(f"{self.seed}:{step.step_index}")
        if step.kind == "small":
            parent = current_config(launch_params(step.start_code or ""))
            pool = [k for k, c in self.land.configs.items() if k not in self.tried and _one_apart(c, parent)]
        else:
            pool = [k for k in self.land.configs if k not in self.tried]
        if not pool:
            return None
        key = rng.choice(sorted(pool))
        self.tried.add(key)
        return apply_config(self.land.seed, self.params, self.land.configs[key])


def _one_apart(a: Config, b: Config) -> bool:
    return sum(1 for k in a if a[k] != b.get(k)) == 1


@dataclass
class Run:
    example: str
    variant: str
    seed: int
    best: float
    steps_to_best: int | None
    not_compiled: int
    abandoned: int
    kinds: str


async def run_tree(land: Landscape, variant: str, seed: int, budget: int, scratch: Path) -> Run:
    store = await Store.open(scratch / f"{land.example}-{variant}-{seed}.db")
    try:
        svc = SearchService(store, RecordedEvaluator(land), Rulebook(store))
        params = {"warm_start": False, **VARIANTS[variant]}
        started = await svc.start(
            land.task, seed_candidate=land.seed, params=params, budget=budget, seed=seed
        )
        proposer = ScriptedProposer(land, seed)
        seed_speedup = started.seed_node.speedup if started.seed_node else None
        best = seed_speedup or 0.0
        reached = 0 if best >= land.best * (1 - WITHIN) else None
        not_compiled = abandoned = 0
        kinds = []
        step = started.next_step
        n = 0
        while step is not None:
            n += 1
            kinds.append(step.kind[0])
            code = proposer.propose(step)
            if code is None:
                result = await svc.abandon(step.tree_id, step.node_id, "nothing left to try")
                abandoned += 1
            else:
                result = await svc.submit(step.tree_id, step.node_id, code)
                if result.node.outcome == "not_compiled":
                    not_compiled += 1
                best = max(best, result.node.speedup or 0.0)
            if reached is None and best >= land.best * (1 - WITHIN):
                reached = n
            step = result.next_step
        return Run(
            land.example, variant, seed, best / land.best, reached, not_compiled, abandoned, "".join(kinds)
        )
    finally:
        await store.aclose()


def summarise(runs: list[Run], budget: int) -> list[dict[str, Any]]:
    rows = []
    for example in dict.fromkeys(r.example for r in runs):
        for variant in VARIANTS:
            mine = [r for r in runs if r.example == example and r.variant == variant]
            if not mine:
                continue
            hit = [r.steps_to_best for r in mine if r.steps_to_best is not None]
            rows.append(
                {
                    "example": example,
                    "variant": variant,
                    "runs": len(mine),
                    "best_fraction": statistics.fmean(r.best for r in mine),
                    "within_3pct": len(hit),
                    "median_steps": statistics.median(hit) if hit else None,
                    "not_compiled": sum(r.not_compiled for r in mine),
                    "abandoned": sum(r.abandoned for r in mine),
                    "budget": budget,
                }
            )
    return rows


BOOTSTRAP = 10_000


def paired_difference(runs: list[Run], example: str, variant: str) -> tuple[float, float, float] | None:
    """The mean difference, variant minus `paper`, of the best found / landscape best over the
    tree seeds both ran (paired by seed), with a 95% bootstrap interval (seeded: it replays)."""
    paper = {r.seed: r.best for r in runs if r.example == example and r.variant == "paper"}
    diffs = [
        r.best - paper[r.seed]
        for r in runs
        if r.example == example and r.variant == variant and r.seed in paper
    ]
    if not diffs:
        return None
    rng = random.Random(0)
    means = sorted(statistics.fmean(rng.choices(diffs, k=len(diffs))) for _ in range(BOOTSTRAP))
    return statistics.fmean(diffs), means[int(0.025 * BOOTSTRAP)], means[int(0.975 * BOOTSTRAP) - 1]


def claims(runs: list[Run]) -> list[str]:
    """Per example and variant: whether the seeds support a difference from `paper` (the 95%
    interval of the paired mean difference excludes 0), or not."""
    out = []
    for example in dict.fromkeys(r.example for r in runs):
        for variant in VARIANTS:
            if variant == "paper":
                continue
            d = paired_difference(runs, example, variant)
            if d is None:
                continue
            mean, lo, hi = d
            verdict = (
                "better than paper" if lo > 0 else "worse than paper" if hi < 0 else "no difference shown"
            )
            out.append(f"| {example} | {variant} | {mean:+.4f} | [{lo:+.4f}, {hi:+.4f}] | {verdict} |")
    head = [
        "| example | variant | mean difference from paper (best / landscape best) | 95% interval | what the seeds support |",
        "|---|---|---|---|---|",
    ]
    return head + out


def table(rows: list[dict[str, Any]], lands: list[Landscape]) -> str:
    size = {
        land.example: (len(land.verdicts), sum(v.speedup is None for v in land.verdicts.values()))
        for land in lands
    }
    lines = [
        "| example (configs, not compiling) | variant | best found / landscape best (mean) | within 3% | median steps to it | not compiled | abandoned |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        n, bad = size[r["example"]]
        steps = f"{r['median_steps']:g}" if r["median_steps"] is not None else "—"
        lines.append(
            f"| {r['example']} ({n}, {bad}) | {r['variant']} | {r['best_fraction']:.3f} | "
            f"{r['within_3pct']} of {r['runs']} | {steps} | {r['not_compiled']} | {r['abandoned']} |"
        )
    return "\n".join(lines)


async def main(args: argparse.Namespace) -> int:
    lands = load_landscapes(args.examples)
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-policy-") as tmp:
        runs = [
            await run_tree(land, variant, seed, args.budget, Path(tmp))
            for land in lands
            for variant in VARIANTS
            for seed in args.seeds
        ]
    rows = summarise(runs, args.budget)
    print(table(rows, lands))
    print()
    print("\n".join(claims(runs)))
    print(f"\n{len(runs)} trees of {args.budget} steps in {time.monotonic() - t0:.0f} s")
    if args.json:
        args.json.write_text(
            json.dumps({"rows": rows, "claims": claims(runs), "runs": [asdict(r) for r in runs]}, indent=1)
            + "\n"
        )
    return 0


def _parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--examples", nargs="*", help="examples with a recorded grid (default: all)")
    p.add_argument("--seeds", type=int, nargs="+", default=list(range(100)), help="tree seeds")
    p.add_argument("--budget", type=int, default=20, help="candidates per tree")
    p.add_argument("--json", type=Path, help="write every run and the summary here")
    return p.parse_args()


if __name__ == "__main__":
    sys.exit(asyncio.run(main(_parse())))
