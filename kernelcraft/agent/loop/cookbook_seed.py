"""The seed step's cookbook hook: the cookbook kernel that best fits a task, found through the
server's `search_examples` tool (the agent reaches the knowledge layer only over MCP).

    example = await cookbook_seed(session, task_source)
    if example is not None:
        seed_code = example.kernel_code    # a ModelNew for the cookbook's own task

The example's ModelNew takes the init arguments of the cookbook's task, which may differ from
the task at hand: the writer adapts it (the LLM's first step), or, with `--llm none`, the offline
tuner starts from it only when `compatible` says so (`tunable_match`): as the seed when none was
given, else as its first step beside the given seed, so the tree keeps whichever is faster. A cookbook entry is advice: the verdict on whatever is built from it
comes from the evaluator like any other candidate's.
"""

from __future__ import annotations

import ast

from kernelcraft.agent.loop.session import ToolSession
from kernelcraft.agent.tuner.search import find_params
from kernelcraft.schema.cookbook import CookbookExample


async def cookbook_seed(session: ToolSession, task_source: str) -> CookbookExample | None:
    """The best-matching cookbook entry for `task_source` (a KernelBench task), with its kernel and
    task code; None when nothing in the cookbook matches."""
    data = await session._call("search_examples", {"query": task_source, "limit": 1, "include_code": True})
    found = data.get("examples") or []
    return CookbookExample.model_validate(found[0]) if found else None


async def tunable_match(session: ToolSession, task_source: str) -> CookbookExample | None:
    """The cookbook kernel the offline tuner can start from for this task: the best match, when its
    Model's signature fits the task's (`compatible`) and it has launch parameters to tune; else None."""
    example = await cookbook_seed(session, task_source)
    if example is None or not example.kernel_code or not compatible(example, task_source):
        return None
    try:
        return example if find_params(example.kernel_code) else None
    except SyntaxError:
        return None


def compatible(example: CookbookExample, task_source: str) -> bool:
    """Whether the example's ModelNew can stand in for the task's Model as it is: both take the
    same init parameters and forward arguments (by name and order). False when either does not
    parse."""
    theirs = _signature(task_source)
    return theirs is not None and _signature(example.task_code) == theirs


def _signature(source: str) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    for cls in tree.body:
        if isinstance(cls, ast.ClassDef) and cls.name == "Model":
            params: dict[str, tuple[str, ...]] = {}
            for fn in cls.body:
                if isinstance(fn, ast.FunctionDef) and fn.name in ("__init__", "forward"):
                    params[fn.name] = tuple(a.arg for a in fn.args.args[1:])
            return params.get("__init__", ()), params.get("forward", ())
    return None
