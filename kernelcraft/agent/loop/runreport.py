"""The run's report, written at the end of `optimize`: tree.json and report.html in the run directory.

The driver speaks MCP: it reads the tree's report data from the server's `trees://{tree_id}/report`
resource (every node with its verdict and speedups, the seed's and the best kernel's code), saves it
as tree.json so that `kernelcraft report RUN_DIR` can redraw the page without the database, adds
what only the run knows (who wrote each step and its tokens, from steps.jsonl; the summary) and
writes report.html. A server without the resource (an older kernelcraft behind --server) costs the
report, not the run.
"""

from __future__ import annotations

import logging
from typing import Any

from mcp import MCPError
from pydantic import ValidationError

from kernelcraft.agent.loop.rundir import RunDir, write_atomic
from kernelcraft.agent.loop.session import ToolSession
from kernelcraft.base.errors import StalledError
from kernelcraft.report.build import with_run
from kernelcraft.report.html import render_html
from kernelcraft.report.model import RunReport

logger = logging.getLogger(__name__)


async def write_run_report(
    session: ToolSession, run: RunDir, tree_id: int, summary: dict[str, Any]
) -> str | None:
    """Write tree.json and report.html; the report's path, or None (with a warning) when the
    server could not give the tree's report."""
    uri = f"trees://{tree_id}/report"
    try:
        tree = RunReport.model_validate_json(await session.read_text(uri, cache_mode="bypass"))
    except (MCPError, ValidationError, StalledError) as e:
        logger.warning("no report written: %s on %s could not be read (%s)", uri, session.where, e)
        return None
    write_atomic(run.tree_file, tree.model_dump_json(indent=2) + "\n")
    write_atomic(run.report_file, render_html(with_run(tree, run.steps(), summary)))
    return str(run.report_file)
