"""What the server's lifespan opens, shared by every request of one server process.

`open_app_state(settings)` is the one place that wires the layers together: it opens the Store,
the evaluator, the rulebook (importing the seed rules on first start), the hardware-manual index
and the search service, and closes them in reverse order, also when opening fails half-way. The
server's lifespan (`app.py`) and the `kernelcraft tree` commands both use it; the agent reaches it
through the in-process server.

The lifespan is the only writer of `AppState`; handlers read it through the request context, or
through `StateSlot` where the SDK gives them no context (static resources).
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from kernelcraft.base.config import Settings
from kernelcraft.base.voice import CLI_VOICE, Voice
from kernelcraft.engine import Evaluator
from kernelcraft.knowledge.docs import HwDocs
from kernelcraft.knowledge.rulebook import Rulebook, RuleJudge
from kernelcraft.search.service import SearchService
from kernelcraft.server.fairness import FairQueue
from kernelcraft.store import Store

logger = logging.getLogger(__name__)

EvaluatorFactory = Callable[[Settings], Evaluator]
NO_JUDGE = (
    "no model judges duplicate rules (none is configured: `serve --llm anthropic|openai`, or "
    "`optimize`/`adapt` with an LLM): a proposed rule merges with an existing one only when its "
    "normalised text is the same or lexically near it"
)


@dataclass
class AppState:
    settings: Settings
    store: Store
    evaluator: Evaluator
    rulebook: Rulebook
    docs: HwDocs
    search: SearchService
    sent: dict[tuple[int, str], Sent] = field(default_factory=dict)
    """What each (tree, reader) holds of its answers (`economy.py`)."""
    readers: weakref.WeakKeyDictionary[Any, str] = field(default_factory=weakref.WeakKeyDictionary)
    """Each MCP session's reader name: its client's and a number of its own. A new session (a new
    conversation, a restarted driver) holds nothing of what earlier sessions were sent."""


@dataclass
class Sent:
    """What one client holds of one tree's answers: rules and manual sections had in full, kernels
    it sent or was sent, the task, the best node (this server process; a restarted server sends
    them again). `economy.py` reads and writes it."""

    rules: set[int] = field(default_factory=set)
    sections: set[int] = field(default_factory=set)
    codes: set[str] = field(default_factory=set)
    """sha256 of each kernel the client sent or was sent."""
    task: bool = False
    """Whether the client has the task's source (it passed it to start)."""
    best: int | None = None
    """The best node last sent."""
    notes: set[str] = field(default_factory=set)
    """Verification notes sent."""
    format: bool = False
    """Whether a step's answer format and notes were said in full."""


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


def default_evaluator_factory(settings: Settings) -> Evaluator:
    """The evaluator `settings.evaluator` names: this machine's (default), or a Ray cluster's
    (Ray is imported only then)."""
    if settings.evaluator == "ray":
        from kernelcraft.engine import RayEvaluator

        return RayEvaluator(
            address=settings.ray_address, memory_limit_gb=settings.memory_limit_gb, settings=settings.knobs
        )
    from kernelcraft.base.config import cache_file
    from kernelcraft.engine import COMPILED_TIMINGS_FILE, LocalEvaluator

    return LocalEvaluator(
        memory_limit_gb=settings.memory_limit_gb,
        timings_file=cache_file(settings.knobs.paths, COMPILED_TIMINGS_FILE),
        settings=settings.knobs,
    )


@asynccontextmanager
async def open_app_state(
    settings: Settings,
    evaluator_factory: EvaluatorFactory = default_evaluator_factory,
    *,
    clients: int = 1,
    judge: RuleJudge | None = None,
    voice: Voice = CLI_VOICE,
) -> AsyncIterator[AppState]:
    """Open everything a kernelcraft process serves from, and close it in reverse order.

    `evaluator_factory(settings)` makes the evaluator (tests may pass a lighter one, the `tree`
    commands a `LocalEvaluator` for their `--device`). `clients`: how many clients can write (the
    HTTP tokens); with more than one, only a second client corroborates a rule (`Rulebook`).
    `judge`: the model that decides whether a proposed rule duplicates an existing one (built by the
    caller that holds a model's key: `serve --llm`, the agent's in-process server); None: text decides.
    `voice`: who reads the services' sentences (the server passes `MCP_VOICE`; the `tree` commands
    keep the command line's).
    """
    async with AsyncExitStack() as stack:
        store = await Store.open(settings.db_path)
        stack.push_async_callback(store.aclose)
        evaluator: Evaluator = evaluator_factory(settings)
        stack.push_async_callback(evaluator.aclose)
        if clients > 1:  # a team server: one client's jobs do not queue another's (fairness.py)
            from kernelcraft.server.auth import client_name  # mcp's auth: not for the `tree` commands

            evaluator = FairQueue(evaluator, client_name)
        rulebook = await _open_rulebook(store, settings, evaluated_corroborates=clients <= 1, judge=judge)
        docs = await _open_docs(store)
        yield AppState(
            settings=settings,
            store=store,
            evaluator=evaluator,
            rulebook=rulebook,
            docs=docs,
            search=SearchService(
                store,
                evaluator,
                rulebook,
                max_code_bytes=settings.max_code_bytes,
                eval_grace_s=settings.eval_grace_s,
                voice=voice,
            ),
        )


async def _open_rulebook(
    store: Store, settings: Settings, *, evaluated_corroborates: bool, judge: RuleJudge | None
) -> Rulebook:
    """The rulebook, with the seed rules imported on first start; says once which way it merges
    near-duplicate rules."""
    rulebook = Rulebook(
        store,
        activation_count=settings.rule_activation_count,
        judge=judge,
        evaluated_corroborates=evaluated_corroborates,
    )
    if judge is None:
        logger.info(NO_JUDGE)
    else:
        logger.info("a model judges whether a proposed rule duplicates an existing one (AdaExplore's prompt)")
    added = await rulebook.import_seed()
    if added:
        logger.info("imported %d seed rules", added)
    return rulebook


async def _open_docs(store: Store) -> HwDocs:
    """The hardware manuals, (re)indexed where they changed since the last start."""
    docs = HwDocs(store)
    report = await docs.index()
    if report.indexed or report.removed:
        logger.info(
            "indexed hardware manuals: %s (%d sections)",
            ", ".join(report.indexed) or "-",
            report.sections,
        )
    return docs
