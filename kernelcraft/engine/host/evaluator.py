"""The evaluator: where compile, verify and profile jobs go.

`Evaluator` is the interface every caller (CLI, search tree, MCP server) uses. `LocalEvaluator`
(in `kernelcraft.engine.host.local`) runs jobs on this machine in isolated worker processes;
`RayEvaluator` (in `kernelcraft.engine.cluster.ray_evaluator`) runs them on a Ray cluster's actors, each
owning a `LocalEvaluator`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from kernelcraft.schema.evaluation import EvalJob, EvalResult

# progress(fraction 0..1, message) — e.g. "queued at position 2", "compiling", "trial 3 of 5".
ProgressCallback = Callable[[float, str], Awaitable[None]]


class Evaluator(Protocol):
    """Runs evaluation jobs. Implementations must never import candidate code in-process."""

    async def submit(self, job: EvalJob, progress: ProgressCallback | None = None) -> EvalResult:
        """Evaluate one candidate. A candidate's failure is a verdict in the result, never an
        exception; exceptions are for unusable jobs (`TaskError`) and faults of the evaluator."""
        ...

    @property
    def has_gpu(self) -> bool:
        """True when jobs run on a CUDA GPU (profile timings available)."""
        ...

    async def aclose(self) -> None:
        """Stop every worker process. Safe to call twice."""
        ...
