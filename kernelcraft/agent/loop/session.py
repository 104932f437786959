"""The driver's MCP client: the server's tools, typed.

The driver does only what any assistant could do: it calls the server's tools. In-process by
default (`mcp.Client(create_server(...))`, the database under KERNELCRAFT_HOME or `--db`), or over
streamable HTTP to a team's server (`--server URL`, bearer token from the variable `--token-env`
names). Tool errors (`is_error`) become `KernelcraftError`s carrying the server's sentence.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from mcp import Client
from pydantic import BaseModel

from kernelcraft.base import knobs as settings_module
from kernelcraft.base.errors import BudgetError, KernelcraftError, StalledError, UsageError
from kernelcraft.base.failures import FailureClass
from kernelcraft.base.knobs import CALL_WAIT_S, EVALUATING_CALL_WAIT_S, Knobs
from kernelcraft.schema.docs import DocSection
from kernelcraft.schema.evaluation import CompileResult
from kernelcraft.schema.rules import FailureRecorded, RuleOut
from kernelcraft.schema.tree import ContextKernel, NextStep, StartResult, SubmitResult, TreeStatus

if TYPE_CHECKING:
    from kernelcraft.agent.llm.judge import ModelJudge

M = TypeVar("M", bound=BaseModel)

EVALUATING_TOOLS = ("verify_against_reference", "profile_kernel", "compile_kernel", "evaluate_level")
"""Tools whose answer waits for an evaluation (as do search_tree_step's start and submit)."""


class ServerToolError(KernelcraftError):
    """A tool answered is_error; the message is the server's."""


class ToolSession:
    """Typed calls to the kernelcraft tools over one open MCP client.

    The server sends a tree's rules and manual sections in full once per client (an answer must fit
    a context window) and never echoes what the client sent (the task, its own kernels); each LLM
    call of the driver starts afresh, so the session keeps what it sent and was sent, per tree, and
    gives every step back whole: the task, each kernel's code by node, the rules it has had in the
    tree (every active rule for the target, read once from rules://active/TARGET, when the tree's
    preset puts them all in the prompt, as AdaExplore's does) and each manual section's text."""

    def __init__(
        self,
        client: Client,
        where: str,
        *,
        call_wait_s: float = CALL_WAIT_S,
        evaluating_wait_s: float = EVALUATING_CALL_WAIT_S,
    ) -> None:
        self.client = client
        self.where = where
        self.tree_rules: dict[int, dict[int, RuleOut]] = {}
        self.tree_sections: dict[int, dict[int, DocSection]] = {}
        # Every call is bounded: a server that never answers stops the run with a sentence.
        self.call_wait_s = call_wait_s
        self.evaluating_wait_s = evaluating_wait_s
        self.tree_tasks: dict[int, str] = {}
        self.tree_codes: dict[int, dict[int, str]] = {}

    async def _call(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        evaluates = name in EVALUATING_TOOLS or args.get("action") in ("start", "submit")
        wait = self.evaluating_wait_s if evaluates else self.call_wait_s
        what = f"{name}({args['action']})" if "action" in args else name
        try:
            result = await asyncio.wait_for(
                self.client.call_tool(name, {k: v for k, v in args.items() if v is not None}), wait
            )
        except asyncio.TimeoutError:
            raise StalledError(
                f"{what} on {self.where} did not answer within {wait:g} s; the server's log says what it "
                "waits for. Rerun with the same --out to resume the run"
            ) from None
        if result.is_error:
            text = " ".join(getattr(c, "text", "") for c in result.content).strip()
            if "budget" in text and "spent" in text:
                raise BudgetError(text)
            raise ServerToolError(f"{name} failed on {self.where}: {text}")
        if result.structured_content is not None:
            return dict(result.structured_content)
        text = "".join(getattr(c, "text", "") for c in result.content)
        return dict(json.loads(text))

    async def read_text(self, uri: str, **kwargs: Any) -> str:
        """A resource's text, within the call bound."""
        try:
            result = await asyncio.wait_for(self.client.read_resource(uri, **kwargs), self.call_wait_s)
        except asyncio.TimeoutError:
            raise StalledError(
                f"reading {uri} on {self.where} did not answer within {self.call_wait_s:g} s; the "
                "server's log says what it waits for"
            ) from None
        return "".join(getattr(c, "text", "") for c in result.contents)

    async def _model(self, name: str, args: dict[str, Any], key: str | None, model: type[M]) -> M:
        data = await self._call(name, args)
        result = model.model_validate(data[key] if key else data)
        step = getattr(result, "next_step", None)
        if isinstance(step, NextStep):
            await self._read_sections(step)
            setattr(result, "next_step", self._whole(step))  # noqa: B010 - any of three result models
        return result

    async def _read_sections(self, step: NextStep) -> None:
        """The text of each manual section the step names that this session has not read: a step
        quotes only a line of each (an assistant's context), the prompts quote their opening."""
        sections = self.tree_sections.setdefault(step.tree_id, {})
        for m in step.manual_sections:
            if m.id in sections:
                continue
            data = await self._call("search_hw_docs", {"section_id": m.id})
            whole = [DocSection.model_validate(x) for x in data.get("sections", [])]
            if whole:
                sections[m.id] = whole[0].model_copy(update={"snippet": _opening(whole[0].snippet)})

    def _whole(self, step: NextStep) -> NextStep:
        """The step with every rule this session has had in its tree and each section's text."""
        rules = self.tree_rules.setdefault(step.tree_id, {})
        for r in step.rules:
            rules.setdefault(r.id, r)
        sections = self.tree_sections.setdefault(step.tree_id, {})
        for m in step.manual_sections:
            if m.snippet and m.id not in sections:
                sections[m.id] = m
        whole = [sections.get(m.id, m) for m in step.manual_sections]
        codes = self.tree_codes.setdefault(step.tree_id, {})
        for k in [*step.chain, *step.pool]:
            if k.code is not None:
                codes.setdefault(k.node_id, k.code)
        if step.start_code is not None:
            codes.setdefault(step.parent_id, step.start_code)
        return step.model_copy(
            update={
                "rules": list(rules.values()),
                "manual_sections": whole,
                "task_source": step.task_source or self.tree_tasks.get(step.tree_id),
                "start_code": (
                    step.start_code or codes.get(step.parent_id) if step.kind == "small" else None
                ),
                "chain": [self._coded(k, codes) for k in step.chain],
                "pool": [self._coded(k, codes) for k in step.pool],
            }
        )

    @staticmethod
    def _coded(kernel: ContextKernel, codes: dict[int, str]) -> ContextKernel:
        if kernel.code is not None:
            return kernel
        return kernel.model_copy(update={"code": codes.get(kernel.node_id)})

    async def _all_rules(self, tree_id: int, target: str) -> None:
        """Every active rule for `target`, for a tree whose preset puts them all in the prompt."""
        text = await self.read_text(f"rules://active/{target}")
        rules = self.tree_rules.setdefault(tree_id, {})
        for r in json.loads(text).get("rules", []):
            rule = RuleOut.model_validate(r)
            rules.setdefault(rule.id, rule)

    async def active_rules(self) -> list[RuleOut]:
        """Every active rule of the rulebook (rules://active), most counted first."""
        text = await self.read_text("rules://active")
        return [RuleOut.model_validate(r) for r in json.loads(text).get("rules", [])]

    async def start(
        self,
        reference_code: str,
        *,
        task_name: str,
        seed_code: str | None,
        target: str,
        budget: int,
        seed: int,
        policy: str,
        preset: str | None = None,
        params: dict[str, int | float | str | bool] | None = None,
    ) -> StartResult:
        started = await self._model(
            "search_tree_step",
            {
                "action": "start",
                "reference_code": reference_code,
                "candidate_code": seed_code,
                "task_name": task_name,
                "target": target,
                "budget": budget,
                "seed": seed,
                "policy": policy,
                "preset": preset,
                "policy_params": params or None,
            },
            "start",
            StartResult,
        )
        self.tree_tasks[started.tree.id] = reference_code
        if seed_code is not None and started.seed_node is not None and started.warm_start is None:
            self.tree_codes.setdefault(started.tree.id, {})[started.seed_node.id] = seed_code
        if started.tree.params.get("rules_in_prompt") == 0:  # all active rules, as AdaExplore
            await self._all_rules(started.tree.id, started.tree.target)
        if started.next_step is not None:
            started.next_step = self._whole(started.next_step)
        return started

    async def submit(self, tree_id: int, node_id: int, code: str) -> SubmitResult:
        self.tree_codes.setdefault(tree_id, {})[node_id] = code
        return await self._model(
            "search_tree_step",
            {"action": "submit", "tree_id": tree_id, "node_id": node_id, "candidate_code": code},
            "submit",
            SubmitResult,
        )

    async def abandon(self, tree_id: int, node_id: int, reason: str) -> SubmitResult:
        return await self._model(
            "search_tree_step",
            {"action": "abandon", "tree_id": tree_id, "node_id": node_id, "reason": reason},
            "abandon",
            SubmitResult,
        )

    async def status(self, tree_id: int) -> TreeStatus:
        return await self._model(
            "search_tree_step", {"action": "status", "tree_id": tree_id}, "status", TreeStatus
        )

    async def another_step(self, tree_id: int) -> TreeStatus:
        """A new step beside those this client holds (action 'next')."""
        return await self._model(
            "search_tree_step", {"action": "next", "tree_id": tree_id}, "status", TreeStatus
        )

    async def compile(self, reference_code: str, code: str, targets: list[str]) -> CompileResult:
        return await self._model(
            "compile_kernel",
            {"reference_code": reference_code, "candidate_code": code, "targets": targets},
            None,
            CompileResult,
        )

    async def record_failure(
        self,
        code: str,
        error: str,
        *,
        reference_code: str,
        arch: str,
        rule: str | None,
        failure_class: FailureClass | None,
        failure_id: int | None = None,
    ) -> FailureRecorded:
        return await self._model(
            "record_failure",
            {
                "candidate_code": code,
                "error": error,
                "reference_code": reference_code,
                "arch": arch,
                "rule": rule,
                "failure_class": failure_class.value if failure_class else None,
                "failure_id": failure_id,
            },
            None,
            FailureRecorded,
        )

    async def rules(
        self, context: str = "", arch: str | None = None, limit: int = 50
    ) -> list[dict[str, Any]]:
        data = await self._call("query_rules", {"context": context, "arch": arch, "limit": limit})
        return list(data.get("rules", []))


def driver_knobs(given: Knobs | None) -> Knobs:
    """The driver's settings: those its caller read once (the command line passes its own), or,
    for a caller that read none (a script, a test), this process's, read here: the driver's
    session is an entry point (`base/knobs.py`)."""
    return given if given is not None else settings_module.settings()


@asynccontextmanager
async def open_session(
    *,
    server_url: str | None,
    token_env: str | None,
    db_path: Path | None,
    evaluator: Literal["local", "ray"] = "local",
    ray_address: str | None = None,
    judge: ModelJudge | None = None,
    knobs: Knobs | None = None,
) -> AsyncIterator[ToolSession]:
    """An MCP session to the in-process server (default; its evaluator `evaluator`, see
    `Settings`; its rulebook's duplicate judge `judge`, see `judge.py`; its settings `knobs`, see
    `driver_knobs`) or to `server_url` (which evaluates and judges with its own). The judge stays
    its caller's to close."""
    if server_url and evaluator != "local":
        raise UsageError(
            f"--evaluator {evaluator} sets the in-process server's evaluator; the server at {server_url} "
            "evaluates with its own (start it with `kernelcraft serve --evaluator ray`)"
        )
    if server_url and judge is not None:
        raise UsageError(f"the server at {server_url} judges duplicate rules with its own model, if any")
    if server_url:
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        headers = {}
        if token_env:
            token = os.environ.get(token_env, "").strip()
            if not token:
                raise UsageError(
                    f"--token-env {token_env}: the variable is not set; export {token_env}=<your bearer token> "
                    "(the server's admin gives you one)"
                )
            headers["Authorization"] = f"Bearer {token}"
        statuses: list[int] = []

        async def note_status(response: httpx2.Response) -> None:
            statuses.append(response.status_code)

        async with AsyncExitStack() as stack:
            http = await stack.enter_async_context(
                httpx2.AsyncClient(
                    headers=headers,
                    timeout=httpx2.Timeout(30.0, read=900.0),
                    event_hooks={"response": [note_status]},
                )
            )
            try:
                client = await stack.enter_async_context(
                    Client(streamable_http_client(server_url, http_client=http))
                )
            except Exception as e:  # the SDK raises an ExceptionGroup whatever went wrong
                raise UsageError(_connect_problem(server_url, token_env, statuses, e)) from None
            yield ToolSession(client, server_url)
        return

    from kernelcraft.base.config import Settings
    from kernelcraft.server.app import create_server

    # The person reading this server's words is at the command line, where `kernelcraft tree
    # status N` opens the same database; a client of a team server gets MCP tool names instead.
    settings = dataclasses.replace(
        Settings.from_knobs(driver_knobs(knobs), db_path),
        evaluator=evaluator,
        ray_address=ray_address,
        audience="cli",
    )
    server = create_server(settings, judge=judge)
    async with Client(server) as client:
        yield ToolSession(client, f"the in-process server (database {settings.db_path})")


def _connect_problem(url: str, token_env: str | None, statuses: list[int], e: BaseException) -> str:
    """Why connecting to a kernelcraft HTTP server failed, and what to do about it."""
    refused = next((code for code in statuses if code >= 400), None)
    if refused == 401:
        if token_env:
            return (
                f"the server at {url} refused the token in ${token_env} (HTTP 401): it is not one the "
                "server accepts; ask its admin for yours"
            )
        return (
            f"the server at {url} needs a bearer token (HTTP 401): export it in a variable and pass "
            "--token-env VARIABLE"
        )
    if refused == 404:
        return f"no MCP endpoint at {url} (HTTP 404): a kernelcraft server's URL ends in /mcp"
    if refused is not None:
        return f"the server at {url} answered HTTP {refused}; its log says why"
    while getattr(e, "exceptions", None):  # an exception group (Python 3.11+, or its backport)
        e = e.exceptions[0]  # type: ignore[attr-defined]
    return (
        f"could not reach {url} ({type(e).__name__}: {e}); check the URL and that "
        "`kernelcraft serve --transport http` is running there"
    )


SECTION_OPENING_CHARS = 900
"""How much of a manual section a driver's prompt quotes."""


def _opening(text: str) -> str:
    if len(text) <= SECTION_OPENING_CHARS:
        return text
    cut = text.rfind(" ", 0, SECTION_OPENING_CHARS)
    return text[: cut if cut > SECTION_OPENING_CHARS // 2 else SECTION_OPENING_CHARS] + " …"
