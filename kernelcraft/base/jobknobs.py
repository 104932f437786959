"""A job's knobs, each defined once: its default, its bounds and its words.

Every place that takes a knob reads it from here: the CLI's flags (`arg_type`, `default`), the MCP
tools' inputs (`field`), the evaluation job (`EvalJob`), a search tree's configuration
(`SearchConfig.timeout_s`, so a tree's steps set their own deadline) and the level runner.
`tests/base/test_jobknobs.py` checks that they agree.

The wait bounds below are what ends a wait that nothing else would: the search service gives an
evaluation `eval_wait_s(timeout)` before it calls the evaluator stuck (its deadline counts from
the moment its workers are assigned, so a job queued behind others on one GPU may take longer than
its timeout), and the driver gives each tool call `CALL_WAIT_S` (an evaluating call
`EVALUATING_CALL_WAIT_S`) before it stops the run saying which call did not answer.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Knob:
    """A number a job takes: `default`, in (`low`, `high`] (`low_open`) or [`low`, `high`]."""

    name: str
    default: float
    low: float
    high: float
    unit: str
    description: str
    low_open: bool = True
    integer: bool = False

    def bounds_words(self) -> str:
        left = "(" if self.low_open else "["
        return f"{left}{self.low:g}, {self.high:g}] {self.unit}".rstrip()

    def check(self, value: float) -> float:
        """`value` when it is within bounds; ValueError saying the range otherwise."""
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"{self.name} must be a finite number in {self.bounds_words()}, not {value!r}")
        low_ok = value > self.low if self.low_open else value >= self.low
        if not low_ok or value > self.high:
            raise ValueError(f"{self.name} must be in {self.bounds_words()}, not {value:g}")
        if self.integer and value != int(value):
            raise ValueError(f"{self.name} must be a whole number in {self.bounds_words()}, not {value:g}")
        return value

    def arg_type(self, text: str) -> float:
        """An argparse `type=`: the flag's text as a number within bounds, or a one-line refusal."""
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of {self.unit or 'units'}") from None
        try:
            self.check(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be in {self.bounds_words()}, not {text}") from None
        return int(value) if self.integer else value

    def field(self, default: Any = None, description: str | None = None) -> Any:
        """A pydantic `Field` with this knob's bounds (and default, unless one is given)."""
        from pydantic import Field  # not at import: workers and the CLI's fast start read this module

        words = description or self.description
        value = self.default if default is None else default
        if self.low_open:
            return Field(default=value, description=words, gt=self.low, le=self.high)
        return Field(default=value, description=words, ge=self.low, le=self.high)


TIMEOUT_S = Knob(
    "timeout_s",
    default=120.0,
    low=0.0,
    high=3600.0,
    unit="s",
    description="Seconds the whole evaluation may take; then its worker is killed.",
)
LEVEL_TIMEOUT_S = 300.0
"""A level's per-task deadline (the same knob, bounds and all): a KernelBench task's baseline
and candidate share it, and level 3's models take longer to load than one kernel."""

TRIALS = Knob(
    "trials",
    default=5,
    low=1,
    high=100,
    unit="",
    description="Input sets the candidate is checked on.",
    low_open=False,
    integer=True,
)

EVAL_GRACE_S = 600.0
"""Beyond a job's own deadline, what its evaluation may wait for workers, memory and the GPU
(other jobs' turns) before the search service calls the evaluator stuck."""
CALL_WAIT_S = 600.0
"""What the driver waits for a tool call that evaluates nothing (a step, a status, a rule)."""
EVALUATING_CALL_WAIT_S = 4 * 3600.0
"""What the driver waits for a submit or a start, which evaluate: past the server's own bound
(`eval_wait_s` of the largest deadline with jobs queued ahead), so the server's sentence comes first."""


def eval_wait_s(timeout_s: float, queued: int, grace_s: float = EVAL_GRACE_S) -> float:
    """How long an evaluation with deadline `timeout_s` may take in all when `queued` other jobs
    of this service are in flight (each may take the GPU alone for its own deadline first)."""
    return timeout_s * (1 + max(queued, 0)) + grace_s
