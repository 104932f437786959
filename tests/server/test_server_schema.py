"""The tool list as clients get it (kernelcraft/server/schema.py): under 30 KB, one nullable form,
every model published once, and every field the models describe still described."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from jsonschema.validators import validator_for
from mcp import Client
from mcp.server.mcpserver import MCPServer
from pydantic import BaseModel
from server_support import TASK, NoEvaluations, settings_for

from kernelcraft.base.failures import FailureClass
from kernelcraft.schema.evaluation import (
    CompileResult,
    EvalResult,
    Evidence,
    KernelCompileInfo,
    KernelLaunch,
    ProfileResult,
    Roofline,
    TargetCompileResult,
    Timing,
)
from kernelcraft.schema.level import FastP, TaskOutcome
from kernelcraft.schema.rules import RuleOut
from kernelcraft.schema.tree import (
    ContextKernel,
    NextStep,
    NodeInfo,
    StartResult,
    SubmitResult,
    TreeInfo,
    WarmStart,
)
from kernelcraft.server.app import create_server
from kernelcraft.server.tools.level import LevelReport
from kernelcraft.server.tools.search import SearchStep

# Issue 15 asked for the tool list in 30 KB (compact JSON, as sent). It is 29.5 KB with eight tools
# (79 KB before kernelcraft/server/schema.py, 34.9 KB before results left out what a reader needs
# no check for and descriptions stopped restating field names), every field keeping its name, type
# and description. Lower the budget as descriptions tighten; a new tool or field has to fit in it.
# search_examples (issue 29's cookbook, a ninth tool) adds 1.4 KB: 31.2 KB with nine tools.
# Issue 29's per-kernel breakdown in ProfileResult (KernelTime: name, calls, µs, share) adds 0.5 KB:
# 32.0 KB. Issue 26's model mode and tree sharing were paid for by shorter descriptions, as were
# issue 29's KernelCompileInfo.dots and ProfileResult.why (0.2 KB): 32.5 KB, the budget's edge.
# Issue 38 asked for 24 KB, for an assistant's 50-step session: results are published with their
# fields' names and types, their descriptions moved to the resource schemas://{tool}
# (`schema.listed`); failure_class is a string argument of record_failure; hints at the protocol's
# defaults are left unsent; results carry no value lists (the resource does), and no titles. 23.7 KB.
MAX_TOOL_LIST_BYTES = 24_000
JsonSchema = dict[str, Any]


def errors(schema: JsonSchema, instance: Any) -> int:
    return sum(1 for _ in validator_for(schema)(schema).iter_errors(instance))


def wire_bytes(listed: Any) -> int:
    """The tools/list result as the SDK puts it on the wire: compact JSON, UTF-8."""
    return len(listed.model_dump_json(by_alias=True, exclude_none=True).encode("utf-8"))


async def both_lists(tmp_path: Path) -> tuple[list[Any], list[Any]]:
    """(what the SDK would publish from the models, what kernelcraft publishes: tools/list, each
    result's schema as the resource schemas://{tool} gives it, with its descriptions)."""
    server = create_server(settings_for(tmp_path), NoEvaluations)
    raw = await MCPServer.list_tools(server)
    async with Client(server) as client:
        shown = (await client.list_tools()).tools
        described = []
        for tool in shown:
            if tool.output_schema is not None:
                read = await client.read_resource(f"schemas://{tool.name}")
                schema = json.loads("".join(getattr(c, "text", "") for c in read.contents))
                tool = tool.model_copy(update={"output_schema": schema})
            described.append(tool)
    return raw, described


@pytest.mark.anyio
async def test_the_tool_list_a_client_receives_stays_within_its_budget(client: Client) -> None:
    listed = await client.list_tools()
    assert wire_bytes(listed) < MAX_TOOL_LIST_BYTES, f"tools/list is {wire_bytes(listed):,} bytes"


# ---------------------------------------------------------------------------- described fields
#
# A field is a property name on a path from a tool's input or output root: through `properties`,
# `items`, `additionalProperties`, `anyOf` branches and `$ref`s. In the published list a path may
# also pass through a model another tool publishes; the words say where ("what T returns", "M in
# T's output schema"), and the rest of the path continues there.

ELSEWHERE = re.compile(
    r"[Ww]hat (?P<tool>\w+) returns|(?P<model>\w+) in (?P<owner>\w+)'s (?P<kind>input|output)\b"
)


def described(
    node: JsonSchema, doc: JsonSchema, follow: Any, path: str = "", depth: int = 0
) -> dict[str, str]:
    """Path -> description of every described property under `node` (of the schema `doc`)."""
    out: dict[str, str] = {}
    if depth > 12:
        return out
    node, doc = follow(node, doc)
    for name, prop in node.get("properties", {}).items():
        here = f"{path}.{name}"
        description = prop.get("description") or follow(prop, doc)[0].get("description")
        if description:
            out[here] = description
        out |= described(prop, doc, follow, here, depth + 1)
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            out |= described(node[key], doc, follow, path + "[]", depth + 1)
    for branch in node.get("anyOf", []):
        out |= described(branch, doc, follow, path, depth + 1)
    return out


def follow_ref(node: JsonSchema, doc: JsonSchema) -> tuple[JsonSchema, JsonSchema]:
    ref = node.get("$ref")
    return (doc["$defs"][ref.removeprefix("#/$defs/")], doc) if ref else (node, doc)


def published_follower(tools: dict[str, Any]) -> Any:
    """Follows `$ref`s, and the words that name a model another tool publishes."""

    def follow(node: JsonSchema, doc: JsonSchema) -> tuple[JsonSchema, JsonSchema]:
        node, doc = follow_ref(node, doc)
        said = ELSEWHERE.search(node.get("description", "")) if "properties" not in node else None
        if said is None:
            return node, doc
        if said["tool"]:
            schema = tools[said["tool"]].output_schema
            return schema, schema
        owner = tools[said["owner"]]
        schema = owner.input_schema if said["kind"] == "input" else owner.output_schema
        return schema["$defs"][said["model"]], schema

    return follow


@pytest.mark.anyio
async def test_every_field_the_models_describe_is_still_described(tmp_path: Path) -> None:
    raw, shown = await both_lists(tmp_path)
    by_name = {t.name: t for t in shown}
    checked = 0
    for tool in raw:
        for kind in ("input_schema", "output_schema"):
            before = getattr(tool, kind)
            after = getattr(by_name[tool.name], kind)
            if before is None:
                continue
            wanted = described(before, before, follow_ref)
            found = described(after, after, published_follower(by_name))
            missing = sorted(set(wanted) - set(found))
            assert missing == [], f"{tool.name} {kind} lost descriptions: {missing}"
            checked += len(wanted)
    assert checked > 150


@pytest.mark.anyio
async def test_the_tool_list_gives_result_types_and_the_resource_their_descriptions(client: Client) -> None:
    listed = (await client.list_tools()).tools
    outputs = [t for t in listed if t.output_schema is not None]
    assert outputs
    for tool in outputs:
        assert '"description"' not in json.dumps(tool.output_schema), tool.name
        read = await client.read_resource(f"schemas://{tool.name}")
        described = json.loads("".join(getattr(c, "text", "") for c in read.contents))
        assert '"description"' in json.dumps(described), tool.name
        assert set(described["properties"]) == set(tool.output_schema["properties"]), tool.name


@pytest.mark.anyio
async def test_a_schema_resource_for_an_unknown_tool_names_the_known_ones(client: Client) -> None:
    with pytest.raises(Exception, match="search_tree_step"):
        await client.read_resource("schemas://no_such_tool")


@pytest.mark.anyio
async def test_a_model_several_results_hold_is_published_in_full_once(tmp_path: Path) -> None:
    _raw, shown = await both_lists(tmp_path)
    text = json.dumps([t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in shown])
    classes = json.dumps([c.value for c in FailureClass])
    assert text.count(classes[1:-1]) == 0  # a string argument of record_failure (issue 38)
    assert text.count('"first_mismatch_index"') == 1  # Evidence, in compile_kernel's output
    assert text.count("Failures behind it.") == 1  # RuleOut, in query_rules' output
    search = next(t for t in shown if t.name == "search_tree_step")
    assert "What verify_against_reference returns." in json.dumps(search.output_schema)


def schema_nodes(node: Any) -> list[JsonSchema]:
    if isinstance(node, list):
        return [n for item in node for n in schema_nodes(item)]
    if not isinstance(node, dict):
        return []
    out = [node]
    for key, value in node.items():
        if key not in ("enum", "default", "const", "examples"):
            out += schema_nodes(value)
    return out


@pytest.mark.anyio
async def test_every_schema_writes_a_nullable_value_one_way_and_no_title(client: Client) -> None:
    # The MCP Inspector's --strict warns on `"type": [X, "null"]`; pydantic writes anyOf elsewhere.
    for tool in (await client.list_tools()).tools:
        nodes = schema_nodes([tool.input_schema, tool.output_schema])
        assert not [n for n in nodes if isinstance(n.get("type"), list)], tool.name
        assert not [n for n in nodes if isinstance(n.get("title"), str)], tool.name
        nullable = [n for n in nodes if {"type": "null"} in n.get("anyOf", [])]
        assert all(len(n["anyOf"]) >= 2 for n in nullable), tool.name
        assert tool.input_schema["additionalProperties"] is False, tool.name


@pytest.mark.anyio
async def test_a_model_every_field_holds_nullable_is_published_nullable_and_the_others_stay_exact(
    client: Client,
) -> None:
    search = next(t for t in (await client.list_tools()).tools if t.name == "search_tree_step")
    schema = search.output_schema
    assert schema is not None
    assert {"type": "null"} in schema["$defs"]["NextStep"]["anyOf"]  # next_step is null at the end
    submitted: dict[str, Any] = {"node": {"id": 3, "kind": "small"}, "best": None, "next_step": None}
    assert errors(schema, {"action": "submit", "submit": submitted}) == 0
    assert errors(schema, {"action": "submit", "submit": {**submitted, "node": None}}) == 1
    assert errors(schema, {"action": "submit", "submit": {**submitted, "next_step": 3}}) == 1
    # A string enumeration in a result is a string in tools/list; its values are in schemas://{tool}.
    huge = {"action": "submit", "submit": {**submitted, "node": {"kind": "huge"}}}
    assert errors(schema, huge) == 0
    read = await client.read_resource("schemas://search_tree_step")
    described = json.loads("".join(getattr(c, "text", "") for c in read.contents))
    assert errors(described, huge) == 1


@pytest.mark.anyio
async def test_inputs_keep_the_bounds_a_client_can_reach_and_leave_sqlites_to_the_server(
    client: Client,
) -> None:
    search = next(t for t in (await client.list_tools()).tools if t.name == "search_tree_step")
    arguments = search.input_schema["properties"]
    assert (arguments["budget"]["minimum"], arguments["budget"]["maximum"]) == (1, 10_000)
    assert arguments["tree_id"]["minimum"] == 1 and "maximum" not in arguments["tree_id"]
    refused = await client.call_tool("search_tree_step", {"action": "status", "tree_id": 2**63})
    assert refused.is_error


@pytest.mark.anyio
async def test_a_manual_sections_title_field_is_kept_while_generated_titles_go(client: Client) -> None:
    docs = next(t for t in (await client.list_tools()).tools if t.name == "search_hw_docs")
    assert docs.output_schema is not None
    assert docs.output_schema["properties"]["sections"]["items"] == {"$ref": "#/$defs/DocSection"}
    section = docs.output_schema["$defs"]["DocSection"]  # search_tree_step's steps name it
    assert "title" in section["properties"] and section["properties"]["title"]["type"] == "string"


# ---------------------------------------------------------------------------- strict and correct


class RuleList(BaseModel):
    """query_rules' result as pydantic publishes it: `$defs`, `$ref`s, a failure-class enum."""

    rules: list[RuleOut]


RULE: dict[str, Any] = {
    "id": 7,
    "uid": "r-9377c311e093323e",
    "text": "You cannot call torch functions such as torch.exp inside a @triton.jit kernel.",
    "count": 1,
    "status": "active",
    "scope": {"dsl": "triton", "arch_family": "nvidia", "op_category": None},
    "reason": "Only triton.language calls compile.",
    "failure_class": "compile_unknown_api",
    "score": 4.41,
    "seed": True,
}


def with_rule(**changes: Any) -> dict[str, Any]:
    return {"rules": [{**RULE, **changes}]}


# name: (instance, whether the published schema accepts it)
INSTANCES: dict[str, tuple[dict[str, Any], bool]] = {
    "valid": (with_rule(), True),
    "null reason and failure class": (with_rule(reason=None, failure_class=None), True),
    "optional fields left out": (
        {"rules": [{k: v for k, v in RULE.items() if k not in ("reason", "score")}]},
        True,
    ),
    "general scope": (with_rule(scope={"dsl": "triton", "arch_family": None, "op_category": None}), True),
    "numeric reason": (with_rule(reason=3), False),
    # A result's value lists are in schemas://{tool}: in tools/list a status is any string.
    "unknown status": (with_rule(status="pending"), True),
    "numeric arch family": (with_rule(scope={"dsl": "triton", "arch_family": 5}), False),
    # Results list no required fields: the server always sends every one.
    "missing uid": ({"rules": [{k: v for k, v in RULE.items() if k != "uid"}]}, True),
    "string id": (with_rule(id="7"), False),
    "rules not a list": ({"rules": RULE}, False),
    # The failure classes are listed once, in record_failure's input: here any string passes.
    "unknown failure class": (with_rule(failure_class="compile_bogus"), True),
    "numeric failure class": (with_rule(failure_class=3), False),
}


@pytest.mark.parametrize("case", INSTANCES)
@pytest.mark.anyio
async def test_query_rules_published_schema_accepts_what_pydantic_accepts_and_rejects_wrong_types(
    client: Client, case: str
) -> None:
    tool = next(t for t in (await client.list_tools()).tools if t.name == "query_rules")
    assert tool.output_schema is not None
    instance, accepted = INSTANCES[case]
    assert (errors(tool.output_schema, instance) == 0) is accepted
    if accepted and case not in ("unknown failure class", "missing uid", "unknown status"):
        assert errors(RuleList.model_json_schema(), instance) == 0


@pytest.mark.anyio
async def test_query_rules_results_pass_the_published_schema(client: Client) -> None:
    tool = next(t for t in (await client.list_tools()).tools if t.name == "query_rules")
    assert tool.output_schema is not None
    # The client validates every result against that schema; a failing one would raise here.
    found = await client.call_tool("query_rules", {"context": TASK, "arch": "sm_90a", "limit": 10})
    assert not found.is_error, found.content
    assert found.structured_content is not None
    assert len(found.structured_content["rules"]) == 10
    assert errors(tool.output_schema, found.structured_content) == 0


# ---------------------------------------------------------------------------- full results
#
# The tool tests send results with the parts a CPU run fills; these fill every optional part
# (timings, a roofline, launches, a warm start, a step's pool and chain, a node's whole verdict).


def full_results() -> dict[str, BaseModel]:
    """Tool -> a result with every optional part set, built from the models the tools return."""
    fc = FailureClass.NUMERICAL_MISMATCH
    timing = Timing(median_us=10.5, iqr_us=0.5, min_us=9.9, reps=100, method="cuda_graph", sets=4)
    evidence = Evidence(message="output 0 differs", trial=0, first_mismatch_index=[0, 3], expected=1.0)
    launch = KernelLaunch(name="k", signature={"x": "*fp32"}, constexprs={"B": 128, "E": True}, grid=[4])
    kernel = KernelCompileInfo(name="k", registers=32, spills=0, constexprs={"B": 128})
    target = TargetCompileResult(target="sm_90a", ok=False, kernels=[kernel], error="boom", failure_class=fc)
    compiled = CompileResult(
        ok=False, launches=[launch], targets=[target], failure_class=fc, evidence=evidence
    )
    roofline = Roofline(
        target="sm_90a", flops=1e6, bytes=4e6, peak_tflops=989, peak_gbps=3350, floor_us=1.2, bound="memory"
    )
    profiled = ProfileResult(
        available=True,
        device="cuda:0",
        candidate=timing,
        reference_eager=timing,
        speedup_vs_eager=1.5,
        roofline=roofline,
    )
    task = TaskOutcome(
        problem_id=19, name="19_ReLU.py", status="correct", candidate_time=timing, eager=timing
    )
    level = LevelReport(
        mode="candidates",
        tasks_dir="l1",
        out_dir="o",
        timed=True,
        total=1,
        tasks=[task],
        fast_p=[FastP(p=1, vs_eager=1)],
    )
    verdict = EvalResult(compile=compiled, profile=profiled, baseline=profiled, stage_seconds={"verify": 1.0})
    node = NodeInfo(
        id=2, tree_id=1, parent_id=1, kind="small", status="evaluated", failure_class=fc, client="c", created_at="t",
        verdict=verdict,
    )  # fmt: skip
    shown = ContextKernel(node_id=1, kind="root", outcome="correct", speedup=1.2, code="y")
    step = NextStep(
        tree_id=1, node_id=3, parent_id=2, kind="large", step_index=2, client="c", lease_expires_at="t", reason="r",
        task_name="t", task_source="s", target="sm_90a", pool=[shown], chain=[shown], rules=[RuleOut(**RULE)],
        speedup_measured=True, instructions="write it",
    )  # fmt: skip
    warm = WarmStart(tree_id=1, node_id=2, match="task_hash", speedup=None)
    tree = TreeInfo(
        id=4, task_name="t", task_hash="h", target="sm_90a", policy="adaexplore", params={"p_large": 0.3}, budget=5,
        seed=0, status="running", steps_issued=1, warm_start=warm, created_by="c", created_at="t",
    )  # fmt: skip
    start = StartResult(tree=tree, seed_node=node, warm_start=warm, next_step=step, message="m")
    submitted = SubmitResult(node=node, new_best=False, best=None, budget_left=3, message="m", next_step=step)
    return {
        "compile_kernel": compiled,
        "profile_kernel": profiled,
        "evaluate_level": level,
        "search_tree_step": SearchStep(action="start", start=start, submit=submitted),
    }


@pytest.mark.anyio
async def test_results_with_every_optional_part_pass_their_published_schema_and_wrong_types_fail(
    client: Client,
) -> None:
    tools = {t.name: t for t in (await client.list_tools()).tools}
    results = full_results()
    for name, result in results.items():
        schema = tools[name].output_schema
        assert schema is not None
        assert errors(schema, result.model_dump(mode="json")) == 0, name  # what the server sends
    sent = results["profile_kernel"].model_dump(mode="json")
    sent["reference_eager"]["reps"] = "many"  # inside a Timing, which profile_kernel publishes nullable
    assert errors(tools["profile_kernel"].output_schema or {}, sent) == 1
