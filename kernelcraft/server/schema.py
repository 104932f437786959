"""Output schemas a client validates cheaply: no `$ref`s, nullable fields as type lists.

The mcp client checks every structured result against the tool's output schema with jsonschema,
whose cost is per schema node visited: each `$ref` is a lookup plus a node, each
`anyOf: [{type: T}, {type: null}]` is a node per branch tried. pydantic emits both for a list of
nested models with optional fields, which made checking a ten-rule `query_rules` result cost
more than the server's own handling of the call. `FlatSchema` publishes the same constraints inlined:
`{"type": ["string", "null"]}` for `str | None`, an enum with `null` in it for `Enum | None`.
Descriptions, defaults, enums and required lists are kept; only the shape of the schema changes.

Only for models without recursion (a recursive model needs its `$ref`s).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from pydantic.annotated_handlers import GetJsonSchemaHandler
from pydantic_core import CoreSchema

JsonSchema = dict[str, Any]

_NULL = {"type": "null"}


def flatten(schema: Any, resolve: GetJsonSchemaHandler) -> Any:
    """`schema` with every `$ref` replaced by its definition and `X | None` unions as type lists.

    `resolve` looks up a `{"$ref": ...}` in the definitions being generated (pydantic raises
    LookupError for a model's reference to itself); a `$ref`'s sibling keys (a field's
    description) win over the definition's.
    """
    if isinstance(schema, list):
        return [flatten(item, resolve) for item in schema]
    if not isinstance(schema, dict):
        return schema
    if "$ref" in schema:
        definition = flatten(resolve.resolve_ref_schema({"$ref": schema["$ref"]}), resolve)
        siblings = {k: flatten(v, resolve) for k, v in schema.items() if k != "$ref"}
        return {**definition, **siblings}
    out = {k: flatten(v, resolve) for k, v in schema.items()}
    nullable = _nullable(out.get("anyOf"))
    if nullable is not None:
        del out["anyOf"]
        out = {**nullable, **out}
    return out


def _nullable(any_of: Any) -> JsonSchema | None:
    """`[{type: T, ...}, {type: null}]` (pydantic's `X | None`) as one schema admitting null, or
    None when the union is anything else."""
    if not isinstance(any_of, list) or len(any_of) != 2 or any_of[1] != _NULL:
        return None
    kind = any_of[0].get("type")
    if not isinstance(kind, str) or not set(any_of[0]) <= {"type", "enum", "title"}:
        return None
    out: JsonSchema = {"type": [kind, "null"]}
    if "enum" in any_of[0]:
        out["enum"] = [*any_of[0]["enum"], None]
    return out


class FlatSchema(BaseModel):
    """A model whose JSON schema is flattened (see the module docstring)."""

    @classmethod
    def __get_pydantic_json_schema__(
        cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchema:
        return flatten(handler.resolve_ref_schema(handler(core_schema)), handler)
