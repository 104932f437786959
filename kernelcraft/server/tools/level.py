"""The `evaluate_level` MCP tool: `kernelcraft level` for an assistant, with progress per task.

It reads folders on the server's machine, so it serves only the server's own user: a stdio client
(the assistant that started the server). Over HTTP a teammate's token would let them read any
`.py` file of the server's user through the verdicts' error texts, so there it is a tool error
saying the server's operator evaluates the level on that machine. Every folder is an absolute
path the client named (`inputs.client_folder`): an empty or relative one is refused, never
resolved against the server's working directory.
"""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field

from kernelcraft.level.runner import LevelRun, run_level
from kernelcraft.level.tasks import parse_problems
from kernelcraft.schema.level import LevelSummary
from kernelcraft.server.auth import LOCAL_CLIENT, client_name
from kernelcraft.server.state import AppState
from kernelcraft.server.tools.common import app_state, tool, tool_errors
from kernelcraft.server.tools.inputs import client_folder

# Writes its out dir (appends outcomes, rewrites the summary); a repeated call resumes to the same result.
RESUMES = ToolAnnotations(destructive_hint=False, idempotent_hint=True, open_world_hint=False)


class LevelReport(LevelSummary):
    """A level run: counts, fast_p per threshold, the geometric-mean speedup, every task's outcome."""


@tool(title="Evaluate a level of tasks", annotations=RESUMES)
async def evaluate_level(
    ctx: Context[AppState],
    tasks_dir: Annotated[
        str,
        Field(description="Absolute folder of tasks on the server's machine, e.g. /data/KernelBench/level1."),
    ],
    out_dir: Annotated[
        str,
        Field(description="Absolute folder for the results; again, it skips the tasks already evaluated."),
    ],
    candidates_dir: Annotated[
        str | None,
        Field(
            description="Candidates named as their task or <problem_id>_*.py; omit to time the "
            "references alone."
        ),
    ] = None,
    problems: Annotated[str | None, Field(description="Only these problem ids, e.g. '1-10,19'.")] = None,
) -> LevelReport:
    """Evaluate a folder of tasks (a KernelBench level) against its candidates: verdicts, GPU
    timings, fast_p, geomean speedup. No GPU: verdicts only."""
    if client_name() != LOCAL_CLIENT:
        raise ToolError(
            "evaluate_level reads folders on the server's machine and serves only its own user (a "
            "stdio client); ask the server's operator to evaluate the level on that machine"
        )
    state = app_state(ctx)
    tasks = client_folder(tasks_dir, "tasks_dir", must_exist=True)
    out = client_folder(out_dir, "out_dir", must_exist=False)
    candidates = (
        client_folder(candidates_dir, "candidates_dir", must_exist=True)
        if candidates_dir is not None
        else None
    )

    async def report(done: int, total: int, message: str) -> None:
        await ctx.report_progress(done, total, message)

    with tool_errors():
        run = LevelRun(
            tasks_dir=tasks,
            out_dir=out,
            candidates_dir=candidates,
            problems=parse_problems(problems) if problems else None,
        )
        summary = await run_level(state.evaluator, run, report)
    return LevelReport.model_validate(summary.model_dump())
