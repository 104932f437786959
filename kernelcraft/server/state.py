"""What the server's lifespan opens, shared by every request of one server process.

The lifespan (`app.py`) is the only writer of `AppState`; handlers read it through the request
context, or through `StateSlot` where the SDK gives them no context (static resources).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kernelcraft.base.config import Settings
from kernelcraft.engine.evaluator import Evaluator
from kernelcraft.knowledge.docs import HwDocs
from kernelcraft.knowledge.rulebook import Rulebook
from kernelcraft.search.service import SearchService
from kernelcraft.store import Store


@dataclass
class AppState:
    settings: Settings
    store: Store
    evaluator: Evaluator
    rulebook: Rulebook
    docs: HwDocs
    search: SearchService


@dataclass
class StateSlot:
    """The running lifespan's state. A stack, because an in-process test may hold two lifespans
    of one server at once; handlers see the newest."""

    stack: list[AppState] = field(default_factory=list)

    @property
    def current(self) -> AppState:
        if not self.stack:
            raise RuntimeError("the kernelcraft server is not running (no lifespan entered)")
        return self.stack[-1]
