"""Threat: on a team server one client reads another's private work through any door: a new tree
warm-started from another client's kernel, a pending rule's wording echoed in a `record_failure`
answer, a tree or its report read by id. This test makes alice's private data (her kernels, a
rule only she proposed, her failures' error text, her reasons) and then walks every tool, every
resource template and every prompt the server lists, as bob, with every action and each optional
argument in turn: nothing of alice's may come back (docs/security.md, "Server state and clients").

The walk is built from the server's own lists (`tools/list`, `resources/templates/list`,
`prompts/list`): a tool added later is walked too, and a required argument this test has no
value for fails it, naming the argument to add to `VALUES`."""

from __future__ import annotations

import json
import secrets
import sys
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

sys.path.insert(0, str(Path(__file__).parents[2]))
from search_scripted import TASK, ScriptedEvaluator, candidate  # noqa: E402
from server_support import settings_for  # noqa: E402

from kernelcraft.cli import server as commands  # noqa: E402
from kernelcraft.server.app import create_server  # noqa: E402
from kernelcraft.server.auth import plan_http  # noqa: E402

BASE = "http://127.0.0.1:8765"
ALICE, BOB = "alice-token-" + secrets.token_hex(8), "bob-token-" + secrets.token_hex(8)
MARK = "zq" + secrets.token_hex(6)
"""In every piece of alice's private data; never in an answer to bob."""
RULE_WORD = MARK.translate(str.maketrans("0123456789", "ghijklmnop"))
"""The rule's marker: letters alone (a token with digits reads as a code identifier, which would
keep bob's near-identical proposal from merging with alice's)."""
ALICE_RULE = f"You cannot pass a mask of another shape to tl.store in a Triton kernel {RULE_WORD}."
BOB_RULE = "You cannot pass a mask of another shape to tl.store in a Triton kernel at all."


def _values(alice: dict[str, int], tmp_path: Path) -> dict[str, Any]:
    """An argument value by name: alice's ids where a tool takes an id."""
    return {
        "reference_code": TASK,
        "candidate_code": candidate("correct 1.5", "bob's own"),
        "tree_id": alice["tree"],
        "node_id": alice["node"],
        "failure_id": alice["failure"],
        "section_id": 1,
        "error": "illegal memory access was encountered",
        "rule": BOB_RULE,
        "context": TASK,
        "query": "tl.store mask",
        "reason": "bob gives up",
        "share_with": "bob",
        "arch": "sm_90a",
        "target": "sm_90a",
        "roofline_target": "sm_90a",
        "targets": ["sm_90a"],
        "budget": 3,
        "seed": 1,
        "limit": 50,
        "trials": 1,
        "timeout_s": 30,
        "allowed_ops": [],
        "eval_mode": False,
        "include_code": True,
        "family": "elementwise",
        "dsl": "triton",
        "task_name": "vector_add",
        "tool": "search_tree_step",
        "policy": "adaexplore",
        "policy_params": {},
        "tasks_dir": str(tmp_path / "tasks"),
        "out_dir": str(tmp_path / "out"),
        "candidates_dir": str(tmp_path / "candidates"),
        "problems": "1",
    }


BASE_ARGUMENTS = {"reference_code", "tree_id", "node_id", "error", "context", "query", "section_id"}
"""Given in every call of a tool that takes them; each other optional argument gets a call of its own."""


def _calls(schema: dict[str, Any], values: dict[str, Any]) -> list[dict[str, Any]]:
    props: dict[str, Any] = schema.get("properties", {})
    required = set(schema.get("required", []))
    missing = sorted(n for n in required if n not in values and "enum" not in props[n])
    assert not missing, f"add a value for {missing} to VALUES: a tool takes them"
    enums = {n: p["enum"] for n, p in props.items() if "enum" in p and n in required | BASE_ARGUMENTS}
    base = {n: values[n] for n in props if n in (required | BASE_ARGUMENTS) and n in values}
    optional = [n for n in props if n not in base and n not in enums and n in values]
    variants = [dict(base)] + [dict(base, **{n: values[n]}) for n in optional]
    calls = []
    for variant in variants:
        if not enums:
            calls.append(variant)
        for name, choices in enums.items():
            calls.extend(dict(variant, **{name: choice}) for choice in choices)
    return calls


def _client(app: Any, token: str) -> tuple[httpx2.AsyncClient, Any]:
    http = httpx2.AsyncClient(
        transport=httpx2.ASGITransport(app=app),
        base_url=BASE,
        headers={"Authorization": f"Bearer {token}"},
        timeout=60,
    )
    return http, Client(streamable_http_client(f"{BASE}/mcp", http_client=http))


async def _alice_works(app: Any) -> dict[str, int]:
    """Alice's private data: a tree with her kernels (a seed and a better step), a step she
    abandoned with her reason, a failure with her error text and a rule only she proposed."""
    http, client = _client(app, ALICE)
    async with http, client:

        async def call(tool: str, args: dict[str, Any]) -> dict[str, Any]:
            result = await client.call_tool(tool, args)
            assert not result.is_error and result.structured_content is not None, result.content
            return result.structured_content

        started = await call(
            "search_tree_step",
            {
                "action": "start",
                "reference_code": TASK,
                "candidate_code": candidate("correct 2.0", f"alice's seed {MARK}seed"),
                "budget": 6,
            },
        )
        tree = started["start"]["tree"]["id"]
        step = started["start"]["next_step"]["node_id"]
        await call(
            "search_tree_step",
            {
                "action": "submit",
                "tree_id": tree,
                "node_id": step,
                "candidate_code": candidate("correct 4.0", f"alice's best {MARK}best"),
            },
        )
        status = await call("search_tree_step", {"action": "next", "tree_id": tree})
        pending = status["status"]["next_step"]["node_id"]
        await call(
            "search_tree_step",
            {"action": "abandon", "tree_id": tree, "node_id": pending, "reason": f"alice's reason {MARK}why"},
        )
        failed = await call(
            "record_failure",
            {
                "candidate_code": candidate("crash", f"alice's failing kernel {MARK}fail"),
                "error": f"illegal memory access {MARK}error",
                "rule": ALICE_RULE,
            },
        )
        assert failed["rule"]["status"] == "candidate"  # one client's word: pending
    return {"tree": tree, "node": step, "failure": failed["failure_id"]}


@pytest.mark.anyio
async def test_a_second_client_gets_nothing_of_the_firsts_private_data_through_any_tool_or_resource(
    tmp_path: Path,
) -> None:
    plan = plan_http("127.0.0.1", 8765, tokens={ALICE: "alice", BOB: "bob"}, no_auth=False)
    server = create_server(settings_for(tmp_path), lambda _: ScriptedEvaluator(), auth=plan.auth)
    app = commands.asgi_app(server, plan)
    walked: dict[str, int] = {}
    leaks: list[str] = []

    def check(where: str, payload: Any) -> None:
        text = payload if isinstance(payload, str) else json.dumps(payload, default=str)
        walked[where.split(" ")[0]] = walked.get(where.split(" ")[0], 0) + 1
        for mark in (MARK, RULE_WORD):
            if mark not in text:
                continue
            at = text.index(mark)
            leaks.append(f"{where}: …{text[max(0, at - 120) : at + 20]}…")
            break

    async with app.router.lifespan_context(app):
        alice = await _alice_works(app)
        values = _values(alice, tmp_path)
        http, bob = _client(app, BOB)
        async with http, bob:
            tools = (await bob.list_tools()).tools
            for tool in tools:
                for args in _calls(tool.input_schema, values):
                    result = await bob.call_tool(tool.name, args)
                    check(f"{tool.name} {sorted(args)}", [c.model_dump() for c in result.content])
                    check(f"{tool.name} {sorted(args)}", result.structured_content)
            for resource in (await bob.list_resources()).resources:
                check(f"{resource.uri}", (await bob.read_resource(str(resource.uri))).model_dump())
            templates = (await bob.list_resource_templates()).resource_templates
            for template in templates:
                uri = template.uri_template
                for name in [p.strip("{}") for p in uri.split("/") if p.startswith("{")] + [
                    p.split("{", 1)[1].rstrip("}")
                    for p in uri.split("/")
                    if "{" in p and not p.startswith("{")
                ]:
                    assert name in values, f"add a value for the resource parameter {name!r} to VALUES"
                    uri = uri.replace("{" + name + "}", str(values[name]))
                try:
                    found: Any = (await bob.read_resource(uri)).model_dump()
                except Exception as e:  # a refusal is an answer too: its words must not leak either
                    found = str(e)
                check(uri, found)
            for prompt in (await bob.list_prompts()).prompts:
                args = {a.name: str(values.get(a.name, "")) for a in prompt.arguments or []}
                check(f"prompt:{prompt.name}", (await bob.get_prompt(prompt.name, args)).model_dump())
            # bob's new tree for the same task starts from his own kernels, never from alice's
            started = await bob.call_tool("search_tree_step", {"action": "start", "reference_code": TASK})
            assert started.structured_content is not None
            warm = started.structured_content["start"]["warm_start"]
    assert not leaks, "\n".join(leaks)
    assert warm is None or warm["tree_id"] != alice["tree"], warm
    assert {t.name for t in tools} <= set(walked), (
        f"tools never walked: {sorted({t.name for t in tools} - set(walked))}"
    )
    assert len(templates) >= 4 and sum(walked.values()) > 50
