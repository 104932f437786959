"""The records `SearchService` passes between the steps of one request (plan, create, describe):
each built whole by one step and read by the next."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kernelcraft.schema.tree import WarmStart
from kernelcraft.search.tree import TreeRow


@dataclass(frozen=True)
class StartPlan:
    """A checked `start` request: the tree to create, with its seed candidate (given, or the
    warm start's kernel) still to be evaluated."""

    task_source: str
    task_name: str
    task_hash: str
    task_key: str
    target: str
    policy: str
    params: dict[str, Any]
    budget: int
    seed: int
    client: str
    seed_candidate: str | None
    warm: WarmStart | None


@dataclass(frozen=True)
class Created:
    """What `starting.create_tree` wrote: the tree, its seed node if any, and the first step (or why none)."""

    tree: TreeRow
    seed_id: int | None
    step_node: int | None
    note: str | None


@dataclass(frozen=True)
class Closed:
    """What `_after_step` leaves for the step's result: the tree as it now stands, its best node,
    the next step handed out (or why none was) and the budget used."""

    tree: TreeRow
    best_id: int | None
    step_node: int | None
    note: str | None
    used_after: int
