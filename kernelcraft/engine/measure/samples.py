"""Statistics of timing samples: the summary a verdict reports and the spread check that decides
whether another timing round is needed. Pure Python (no torch), so the job in the parent process
uses it without importing `timing.py`, which captures CUDA functions at import.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Literal

from kernelcraft.schema.evaluation import Timing

MIN_SAMPLE_US = 0.01  # samples are clipped here (never <= 0)
SPREAD_CHECK_ABOVE_US = 50.0  # the spread target applies to kernels longer than this
ROUND_CHECK_ABOVE_US = 10.0  # rounds must agree for callables longer than this


def summarize(
    times_us: Sequence[float], method: Literal["cuda_events", "cuda_graph"], sets: int = 1
) -> Timing:
    """Median, interquartile range and minimum of per-call samples (µs), with how many were
    clipped at `MIN_SAMPLE_US`. Pure Python."""
    if not times_us:
        raise ValueError("no timing samples to summarize")
    ordered = sorted(times_us)
    if len(ordered) >= 2:
        q1, _q2, q3 = statistics.quantiles(ordered, n=4, method="inclusive")
    else:
        q1 = q3 = ordered[0]
    return Timing(
        median_us=statistics.median(ordered),
        iqr_us=q3 - q1,
        min_us=ordered[0],
        reps=len(ordered),
        method=method,
        sets=sets,
        clipped=sum(1 for t in ordered if t <= MIN_SAMPLE_US),
    )


def _spread(times: Sequence[float]) -> float:
    t = summarize(times, "cuda_events")
    return t.iqr_us / t.median_us if t.median_us > 0 else 0.0


def spread_within(times: Sequence[float], target: float) -> bool:
    """True when the samples' IQR is within `target` of their median, or the median is at most
    `SPREAD_CHECK_ABOVE_US` (where a few percent is noise nobody acts on). Pure Python."""
    return statistics.median(times) <= SPREAD_CHECK_ABOVE_US or _spread(times) <= target


def agreeing_rounds(rounds: Sequence[Sequence[float]], agreement: float) -> list[list[float]]:
    """The rounds whose median is within `agreement` (a fraction) of the median of all rounds'
    medians; every round when that median is at most `ROUND_CHECK_ABOVE_US` (launch jitter). A
    round outside it is an outlier: one slow burst must not move a profile. Pure Python."""
    kept = [list(r) for r in rounds if r]
    if not kept:
        return []
    medians = [statistics.median(r) for r in kept]
    centre = statistics.median(medians)
    if centre <= ROUND_CHECK_ABOVE_US:
        return kept
    return [r for r, m in zip(kept, medians, strict=True) if abs(m - centre) <= agreement * centre]


def round_spread(rounds: Sequence[Sequence[float]]) -> float:
    """The largest gap between a round's median and the median of rounds, as a fraction of it."""
    medians = [statistics.median(r) for r in rounds if r]
    if not medians:
        return 0.0
    centre = statistics.median(medians)
    return max(abs(m - centre) for m in medians) / centre if centre > 0 else 0.0
