"""What every tool shares: the registration (`tool`), errors a model can act on, the size limit,
the structured answer, the evaluator's queue with progress.

Each handler validates what the schema cannot (code size), calls one layer and returns that
layer's pydantic model as structured content. A `KernelcraftError` becomes a `ToolError` whose
sentence says what to do; a candidate that fails is a verdict in the result, never an error.
Writes are attributed to the calling client (`auth.client_name()`: the token's name over HTTP,
"local" over stdio).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

from kernelcraft.base.errors import KernelcraftError
from kernelcraft.base.failures import FailureClass
from kernelcraft.engine import ProgressCallback
from kernelcraft.schema.evaluation import EvalJob, EvalResult
from kernelcraft.server.state import AppState
from kernelcraft.server.tools.answers import answer
from kernelcraft.server.words import MCP_WORDS

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

# Queries and evaluations change nothing a later call can see; open_world false: they touch only
# this server's database and workers, never the internet.
# A hint left unset is the protocol's default (read_only false, destructive true, idempotent
# false, open_world true): only the hints that differ are sent (destructive is moot when read-only).
READ_ONLY = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)
# Writes that add (a failure, a node) and never delete or overwrite; repeating one adds again.
APPENDS = ToolAnnotations(destructive_hint=False, open_world_hint=False)


@contextmanager
def tool_errors() -> Iterator[None]:
    """Turn our expected errors into the tool error a model reads (is_error + the sentence)."""
    try:
        yield
    except KernelcraftError as e:
        raise ToolError(MCP_WORDS.error(str(e))) from e


def check_size(state: AppState, name: str, code: str | None) -> None:
    """Refuse source over the configured limit (1 MB) before it reaches a layer."""
    if code is None:
        return
    size = len(code.encode("utf-8"))
    limit = state.settings.max_code_bytes
    if size > limit:
        raise ToolError(
            f"{name} is {size:,} bytes, over the {limit:,}-byte limit; send only the module itself "
            "(no embedded data or generated tables) and retry"
        )


NESTED_TOO_DEEPLY = (
    "an argument nests too deeply for the server to read (an expression or a structure thousands of "
    "levels deep); split it into statements and retry"
)
TOO_LARGE = "a number in the arguments is too large: ids, seeds and counts fit a 64-bit signed integer"


def cleaned(fn: F) -> F:
    """A tool as published: its docstring dedented (the SDK publishes it as the tool's description;
    Python < 3.13 keeps the indent), its result sent as structured content with a short summary
    for text (`answers.py`). The SDK reads the signature through `__wrapped__`."""
    fn.__doc__ = inspect.cleandoc(fn.__doc__ or "")

    @functools.wraps(fn)
    async def tool(*args: Any, **kwargs: Any) -> Any:
        try:
            result = await fn(*args, **kwargs)
        except RecursionError:  # whatever layer met it: a client's text, never a fault of ours
            raise ToolError(NESTED_TOO_DEEPLY) from None
        except OverflowError:
            raise ToolError(TOO_LARGE) from None
        ctx = kwargs.get("ctx")
        settings = ctx.request_context.lifespan_context.settings if ctx is not None else None
        return answer(result, settings)

    return cast(F, tool)


def failure_class_named(name: str | None) -> FailureClass | None:
    """The failure class a client copied from a verdict (published as a string: the list of 26
    classes would cost every session's context more than the one argument is worth)."""
    if name is None:
        return None
    try:
        return FailureClass(name.strip().lower().replace(" ", "_"))
    except ValueError:
        known = ", ".join(c.value for c in FailureClass)
        raise ToolError(
            f"unknown failure_class {name!r}; copy one from a verdict, or omit it to have the error "
            f"classified. The classes: {known}"
        ) from None


def app_state(ctx: Context[AppState]) -> AppState:
    return ctx.request_context.lifespan_context


def progress_to(ctx: Context[AppState]) -> ProgressCallback:
    """Forward the evaluator's progress (queued at position k, compiling, trial i of n, timing) to
    the client; the SDK sends it only when the client passed a progress token."""

    # MCP requires progress to increase with every notification; stages restart their own counts.
    highest = 0.0

    async def report(fraction: float, message: str) -> None:
        nonlocal highest
        highest = max(highest, min(fraction, 1.0))
        await ctx.report_progress(highest, 1.0, message)

    return report


async def evaluate(ctx: Context[AppState], job: EvalJob) -> EvalResult:
    """One job through the evaluator's queue. Awaiting never blocks the event loop (the work runs in
    worker processes); if the client goes away the cancellation reaches the evaluator, which kills
    the job's worker."""
    state = app_state(ctx)
    check_size(state, "reference_code", job.task_source)
    check_size(state, "candidate_code", job.candidate_source)
    with tool_errors():
        result = await state.evaluator.submit(job, progress=progress_to(ctx))
    if result.failure_class is not None:
        # The server's own verdict: a record_failure of this candidate is then evaluated evidence.
        state.rulebook.witness(job.candidate_source, result.failure_class)
    return result


def _stage(part: T | None, stage: str) -> T:
    if part is None:
        # The evaluator answered without the stage it was asked for: a fault of ours, logged by the SDK.
        raise RuntimeError(f"the evaluator returned no {stage} result")
    return part


@dataclass(frozen=True)
class Tool:
    """A tool as the server publishes it: its handler (`cleaned`), name, title and hints."""

    fn: Callable[..., Any]
    name: str
    title: str
    annotations: ToolAnnotations

    def register(self, mcp: MCPServer[AppState]) -> None:
        mcp.add_tool(self.fn, name=self.name, title=self.title, annotations=self.annotations)


def tool(*, title: str, annotations: ToolAnnotations) -> Callable[[Callable[..., Any]], Tool]:
    """Make a handler a `Tool`: its name is the function's, its description the docstring. The
    server publishes the tools `kernelcraft.server.tools.TOOLS` lists, in that order."""

    def make(fn: Callable[..., Any]) -> Tool:
        return Tool(cleaned(fn), fn.__name__, title, annotations)

    return make
