"""The flat output schema of query_rules: as strict as pydantic's, cheaper for a client to check."""

from __future__ import annotations

import json
from typing import Any

import pytest
from jsonschema.validators import validator_for
from mcp import Client
from pydantic import BaseModel
from server_support import TASK

from kernelcraft.base.failures import FailureClass
from kernelcraft.base.rules import RuleOut
from kernelcraft.server.schema import FlatSchema
from kernelcraft.server.tools import RuleList


class NestedRuleList(BaseModel):
    """RuleList as pydantic publishes it by default: `$defs`, `$ref`s and `anyOf` unions."""

    rules: list[RuleOut]


def errors(schema: dict[str, Any], instance: Any) -> int:
    return sum(1 for _ in validator_for(schema)(schema).iter_errors(instance))


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


INSTANCES = {
    "valid": with_rule(),
    "null reason and failure class": with_rule(reason=None, failure_class=None),
    "optional fields left out": {"rules": [{k: v for k, v in RULE.items() if k not in ("reason", "score")}]},
    "general scope": with_rule(scope={"dsl": "triton", "arch_family": None, "op_category": None}),
    "unknown failure class": with_rule(failure_class="compile_bogus"),
    "numeric reason": with_rule(reason=3),
    "unknown status": with_rule(status="pending"),
    "numeric arch family": with_rule(scope={"dsl": "triton", "arch_family": 5}),
    "missing uid": {"rules": [{k: v for k, v in RULE.items() if k != "uid"}]},
    "string id": with_rule(id="7"),
    "rules not a list": {"rules": RULE},
}


@pytest.mark.parametrize("case", INSTANCES)
def test_the_flat_schema_accepts_and_rejects_exactly_what_the_nested_one_does(case: str) -> None:
    flat, nested = RuleList.model_json_schema(), NestedRuleList.model_json_schema()
    assert "$defs" in nested
    assert (errors(flat, INSTANCES[case]) == 0) == (errors(nested, INSTANCES[case]) == 0)


def test_the_flat_schema_keeps_every_field_description_and_failure_class() -> None:
    rule = RuleList.model_json_schema()["properties"]["rules"]["items"]
    assert set(rule["properties"]) == set(RuleOut.model_fields)
    assert rule["required"] == ["id", "uid", "text", "count", "status", "scope"]
    for name, field in rule["properties"].items():
        assert name == "scope" or field.get("description"), name
    assert rule["properties"]["failure_class"]["enum"] == [c.value for c in FailureClass] + [None]
    assert rule["properties"]["reason"]["type"] == ["string", "null"]


def test_a_recursive_model_cannot_have_a_flat_schema() -> None:
    class Node(FlatSchema):
        children: list[Node]

    with pytest.raises(LookupError, match="recursive model"):
        Node.model_json_schema()


@pytest.mark.anyio
async def test_query_rules_publishes_the_flat_schema_and_its_results_pass_it(client: Client) -> None:
    tool = next(t for t in (await client.list_tools()).tools if t.name == "query_rules")
    assert tool.output_schema is not None
    text = json.dumps(tool.output_schema)
    assert "$ref" not in text and "$defs" not in text and "anyOf" not in text

    # The client validates every result against that schema; a failing one would raise here.
    found = await client.call_tool("query_rules", {"context": TASK, "arch": "sm_90a", "limit": 10})
    assert not found.is_error, found.content
    assert found.structured_content is not None
    assert len(found.structured_content["rules"]) == 10
    assert errors(tool.output_schema, found.structured_content) == 0
