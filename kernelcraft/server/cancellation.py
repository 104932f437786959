"""Deliver a client's cancellation to the evaluator once, and wait for it to clean up.

The MCP SDK runs handlers inside anyio cancel scopes, whose cancellation is level-triggered: once
a scope is cancelled, every later `await` inside it is cancelled again, including the awaits in
an evaluator's `finally` that kill its worker processes. Measured with the LocalEvaluator: a
client that went away mid-verify left the candidate's worker running. So the server runs each
evaluation in its own asyncio task; when the request is cancelled the task gets one ordinary
`cancel()`, its cleanup runs to the end under a shielded scope (bounded by `CLEANUP_S`), and the
cancellation then continues up the handler.
"""

from __future__ import annotations

import asyncio
import logging

import anyio

from kernelcraft.tools.evaluator import Evaluator, ProgressCallback
from kernelcraft.tools.models import EvalJob, EvalResult

logger = logging.getLogger(__name__)

CLEANUP_S = 30.0


class CancellationSafeEvaluator:
    """Wraps an `Evaluator`; a cancelled `submit` returns only after the job's workers are gone."""

    def __init__(self, inner: Evaluator) -> None:
        self.inner = inner

    @property
    def has_gpu(self) -> bool:
        return self.inner.has_gpu

    async def submit(self, job: EvalJob, progress: ProgressCallback | None = None) -> EvalResult:
        task = asyncio.ensure_future(self.inner.submit(job, progress))
        try:
            return await asyncio.shield(task)
        except BaseException:
            if not task.done():
                task.cancel()
                with anyio.CancelScope(shield=True), anyio.move_on_after(CLEANUP_S) as scope:
                    await asyncio.wait([task])
                if scope.cancelled_caught:
                    logger.error(
                        "an evaluation did not finish its cleanup within %.0f s of cancellation", CLEANUP_S
                    )
            raise

    async def aclose(self) -> None:
        await self.inner.aclose()
