"""fast_p and the geometric-mean speedup over a level's outcomes (pure functions).

fast_p (KernelBench's headline metric): the fraction of ALL tasks that are correct and more than
p times faster than the baseline, `speedup > p` as KernelBench's `score.fastp` counts it. Missing
candidates, failures and unusable tasks are in the denominator. With timings, a correct task
without a speedup (its timing was rejected or failed) counts at no p; without timings (no GPU),
only p = 0 is defined, and fast_0 is the fraction correct.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from kernelcraft.schema.level import FAST_P_THRESHOLDS, FastP, TaskOutcome


def fast_p(outcomes: Sequence[TaskOutcome], *, timed: bool) -> list[FastP]:
    total = len(outcomes)
    if total == 0:
        return []
    correct = [o for o in outcomes if o.status == "correct"]
    if not timed:
        return [FastP(p=0.0, vs_eager=len(correct) / total, vs_compiled=len(correct) / total)]

    def share(p: float, speedups: list[float | None]) -> float:
        return sum(1 for s in speedups if s is not None and s > p) / total

    eager = [o.speedup_vs_eager for o in correct]
    compiled = [o.speedup_vs_compiled for o in correct]
    return [FastP(p=p, vs_eager=share(p, eager), vs_compiled=share(p, compiled)) for p in FAST_P_THRESHOLDS]


def geomean(speedups: Sequence[float | None]) -> float | None:
    """The geometric mean of the speedups that were measured; None when there are none."""
    measured = [s for s in speedups if s is not None and s > 0]
    if not measured:
        return None
    return math.exp(sum(math.log(s) for s in measured) / len(measured))
