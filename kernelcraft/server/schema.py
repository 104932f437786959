"""The schemas a client reads in `tools/list`: small, in one form, every described field kept.

A client keeps the tool list in every session's context, and checks each structured result
against the tool's output schema (jsonschema's cost is per schema node visited). pydantic's
schemas are right but costly to ship: each tool carries its own copy of every model it touches
(the evidence of a failed check was published four times, the failure classes six), a generated
`title` on every field, and defaults on output fields the server always sends. `published`
rewrites the tool list, keeping every property with its type and description, and what inputs
require (their enums and the bounds a client can reach):

- every model is published in full once in the whole list. A tool's whole result is its own; a
  model an input uses is that input's; another model that several results hold is published, under
  `$defs/<Model>`, by the tool whose result holds it nearest its root (the first such tool); the
  other tools name it: `{"type": "object", "description": "…: Evidence in compile_kernel's
  output."}`, `"…: what verify_against_reference returns."`;
- within one schema, a definition referenced once is written in place, one referenced more often
  stays in `$defs`, and unreferenced ones go; in a result, a model that every field holding it
  holds nullable is published nullable there once, and the fields hold a plain `$ref`;
- generated titles go; in output schemas so do defaults, `required` lists (the server sends every
  field), the root's description (the tool's description says what it returns), and what a reader
  of a result checks nothing against: the failure classes (a string there; record_failure's input
  lists them), the `type` beside a string enum (its values say it), the type of a map's scalar
  values (a constexpr's, a stage's seconds); inputs leave out bounds at SQLite's integer limits
  (the server refuses a larger id and says so);
- an optional input argument whose default is null is published as its own type, left out of
  `required`: omitting it is how a client leaves it unset (null is still accepted);
- a field description the list already gave (the task's source, in three tools) is given once:
  later fields point at the first;
- input schemas say `additionalProperties: false`: the server refuses names it does not know;
- a nullable value is `anyOf: [X, {"type": "null"}]` (pydantic's form) everywhere, never
  `"type": [X, "null"]`, which several clients read as one type (the MCP Inspector's `--strict`
  reports it as `type-union`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mcp.types import Tool

JsonSchema = dict[str, Any]

_DEFS = "#/$defs/"
_NULL = {"type": "null"}
# Keywords whose value is a schema, a list of schemas, or a map of names to schemas; every other
# keyword's value is data (an enum, a default, a description) and is never rewritten.
_ONE = ("additionalProperties", "items", "not", "if", "then", "else", "contains", "propertyNames")
_MANY = ("anyOf", "oneOf", "allOf", "prefixItems")
_MAPS = ("properties", "patternProperties", "$defs")
_SCALARS = ("string", "number", "integer", "boolean", "null")
# SQLite's 64-bit integer limits: the server checks them (and says so), no client comes near them.
_STORAGE_BOUNDS = {("maximum", 2**63 - 1), ("minimum", -(2**63))}


@dataclass(frozen=True)
class Owners:
    """Which tool publishes each model: `results` maps a tool's whole result to it, `defs` a model
    several schemas hold to the tool and the schema ('input' or 'output') that keeps it under
    `$defs/<Model>`."""

    results: dict[str, str] = field(default_factory=dict)
    defs: dict[str, tuple[str, str]] = field(default_factory=dict)

    def elsewhere(self, tool: str) -> dict[str, str]:
        """Models `tool`'s output names instead of publishing, each with the words that say where."""
        said = {m: f"what {t} returns" for m, t in self.results.items() if t != tool}
        said |= {
            m: f"{m} in {t}'s {kind}" for m, (t, kind) in self.defs.items() if (t, kind) != (tool, "output")
        }
        return said

    def kept(self, tool: str, kind: str) -> frozenset[str]:
        """Models `tool`'s `kind` schema publishes under `$defs/<Model>` for the others to name."""
        return frozenset(m for m, owner in self.defs.items() if owner == (tool, kind))


def published(tools: list[Tool]) -> list[Tool]:
    """The tool list as clients get it: every tool's schemas rewritten (see the module docstring)."""
    owners = model_owners(tools)
    out = []
    for tool in tools:
        update: dict[str, Any] = {
            "input_schema": input_schema(tool.input_schema, owners.kept(tool.name, "input"))
        }
        if tool.output_schema is not None:
            update["output_schema"] = output_schema(
                tool.output_schema, owners.elsewhere(tool.name), owners.kept(tool.name, "output")
            )
        out.append(tool.model_copy(update=update))
    return said_once(out)


def listed(tools: list[Tool]) -> list[Tool]:
    """The tool list as `tools/list` sends it: `published`, with output schemas that keep every
    field's name and JSON type but no descriptions and no value lists (a client checks a result
    against its types; a model reads the answer's own words). The described result of each tool,
    value lists included, is the resource schemas://{tool} (`described_output`): nothing is lost,
    only moved out of every session's context (issue 38: the list in 24 KB). Tools go without their
    display titles: a client shows the name, which says as much."""
    return [
        t.model_copy(update={"output_schema": _undescribed(t.output_schema), "title": None})
        if t.output_schema
        else t.model_copy(update={"title": None})
        for t in published(tools)
    ]


def _undescribed(node: Any) -> Any:
    if isinstance(node, list):
        return [_undescribed(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {}
    if isinstance(node.get("enum"), list) and all(isinstance(v, str) for v in node["enum"]):
        node = {**{k: v for k, v in node.items() if k != "enum"}, "type": "string"}
    for key, value in node.items():
        if key == "description" and isinstance(value, str):
            continue
        if key in _MAPS and isinstance(value, dict):
            out[key] = {name: _undescribed(v) for name, v in value.items()}
        elif key in _ONE or key in _MANY:
            out[key] = _undescribed(value)
        else:
            out[key] = value
    return out


# A field description at least this long that the list already gave is given once: later fields
# with the same text point at the first ("As compile_kernel's candidate_code.").
MIN_REPEATED_CHARS = 40


def said_once(tools: list[Tool]) -> list[Tool]:
    """`tools` with every repeated field description (inputs first, in list order) replaced by a
    pointer to the field that gave it first."""
    first: dict[str, str] = {}

    def visit(node: Any, tool: str) -> None:
        if isinstance(node, list):
            for item in node:
                visit(item, tool)
        elif isinstance(node, dict):
            for key, value in node.items():
                if key == "properties" and isinstance(value, dict):
                    for name, prop in value.items():
                        text = prop.get("description") if isinstance(prop, dict) else None
                        if isinstance(text, str) and len(text) >= MIN_REPEATED_CHARS:
                            if text in first:
                                prop["description"] = first[text]
                            else:
                                first[text] = f"As {tool}'s {name}."
                if key in _ONE or key in _MANY or key in _MAPS:
                    visit(value, tool)

    for tool in tools:
        visit(tool.input_schema, tool.name)
    for tool in tools:
        visit(tool.output_schema, tool.name)
    return tools


def model_owners(tools: list[Tool]) -> Owners:
    """Who publishes each model that some tool's result holds and another schema holds too.

    Input schemas keep every model they use (a client checks its arguments against them); a
    model an input publishes is named by the results that hold it (an enumeration is not: a result
    holds it as its type). A tool's whole result is its own. Any other model that two results reach
    is published by the tool that reaches it in the fewest steps from its root (the first in list
    order, on a tie). A model reached only through a model published elsewhere is not reached, so
    ownership is settled again until it no longer changes.
    """
    outputs = {t.name: t.output_schema for t in tools if t.output_schema is not None}
    owners = Owners(results={s["title"]: name for name, s in outputs.items() if "title" in s})
    in_outputs = {m for s in outputs.values() for m, d in s.get("$defs", {}).items() if "enum" not in d}
    for tool in tools:
        for model in tool.input_schema.get("$defs", {}):
            if model in in_outputs and model not in owners.defs:
                owners.defs[model] = (tool.name, "input")
    by_inputs = dict(owners.defs)
    for _ in range(len(in_outputs) + 1):
        reached: dict[str, list[tuple[int, int, str]]] = {}
        for order, (name, schema) in enumerate(outputs.items()):
            named = owners.elsewhere(name)
            for model, depth in _depths(_root(schema), schema.get("$defs", {}), named).items():
                reached.setdefault(model, []).append((depth, order, name))
        shared = {
            m: (min(users)[2], "output")
            for m, users in reached.items()
            if len(users) > 1 and m not in by_inputs and m not in owners.results
        }
        # A model reached before only through one now published elsewhere is no longer shared.
        settled = {**by_inputs, **shared}
        if settled == owners.defs:
            break
        owners.defs.clear()
        owners.defs.update(settled)
    return owners


def input_schema(schema: JsonSchema, kept: frozenset[str] = frozenset()) -> JsonSchema:
    """A tool's arguments: closed to unknown names, optional null-default arguments as their type;
    the models in `kept` stay under `$defs/<Model>` for other tools to name."""
    out = _Rewriter(schema, output=False, kept=kept)(_root(schema))
    required = set(out.get("required", []))
    properties = out.get("properties", {})
    out["properties"] = {k: v if k in required else _optional(v) for k, v in properties.items()}
    out["additionalProperties"] = False
    return out


def output_schema(
    schema: JsonSchema, elsewhere: Mapping[str, str] | None = None, kept: frozenset[str] = frozenset()
) -> JsonSchema:
    """A tool's result. `elsewhere` maps a model published by another tool to the words that say
    where; the models in `kept` stay under `$defs/<Model>` for other tools to name."""
    out = _Rewriter(schema, output=True, elsewhere=elsewhere or {}, kept=kept)(_root(schema))
    out.pop("description", None)  # the tool's description says what it returns
    return out


def _root(schema: JsonSchema) -> JsonSchema:
    return {k: v for k, v in schema.items() if k != "$defs"}


def _optional(prop: JsonSchema) -> JsonSchema:
    """`anyOf: [X, null]` with a null default as X alone: the argument is left out, not sent as null."""
    any_of = prop.get("anyOf")
    if prop.get("default", ...) is not None or not isinstance(any_of, list) or len(any_of) != 2:
        return prop
    branches = [b for b in any_of if b != _NULL]
    if len(branches) != 1:
        return prop
    rest = {k: v for k, v in prop.items() if k not in ("anyOf", "default")}
    return {**branches[0], **rest}


def _scalars(node: Any) -> bool:
    """Whether `node` admits only scalars (a type, or an `anyOf` of types, that is not a container)."""
    branches = node.get("anyOf", [node]) if isinstance(node, dict) else []
    return bool(branches) and all(isinstance(b, dict) and b.get("type") in _SCALARS for b in branches)


def _nullable(node: JsonSchema) -> str | None:
    """The definition that `node` holds as `anyOf: [{"$ref": …}, {"type": "null"}]`, if it does."""
    any_of = node.get("anyOf")
    if not isinstance(any_of, list) or len(any_of) != 2 or _NULL not in any_of:
        return None
    branch = any_of[1] if any_of[0] == _NULL else any_of[0]
    ref = branch.get("$ref") if isinstance(branch, dict) and len(branch) == 1 else None
    return ref.removeprefix(_DEFS) if isinstance(ref, str) else None


def _refs(node: Any, *, plain: bool = False) -> list[str]:
    """The definition names `node` references, one entry per reference; `plain`: only those not held
    nullable."""
    if isinstance(node, list):
        return [name for item in node for name in _refs(item, plain=plain)]
    if not isinstance(node, dict):
        return []
    found = [node["$ref"].removeprefix(_DEFS)] if isinstance(node.get("$ref"), str) else []
    for key, value in node.items():
        if key == "anyOf" and plain and _nullable(node) is not None:
            continue
        if key in _ONE or key in _MANY:
            found += _refs(value, plain=plain)
        elif key in _MAPS and isinstance(value, dict):
            found += [name for sub in value.values() for name in _refs(sub, plain=plain)]
    return found


def _reference_counts(
    root: JsonSchema, defs: Mapping[str, JsonSchema], elsewhere: Mapping[str, str]
) -> tuple[Counter[str], Counter[str]]:
    """How often each definition reachable from `root` is referenced, in all and not held nullable;
    a model published elsewhere is counted where it is referenced but not followed."""
    counts: Counter[str] = Counter()
    plain: Counter[str] = Counter()
    seen: set[str] = set()
    todo = [root]
    while todo:
        node = todo.pop()
        plain.update(_refs(node, plain=True))
        for name in _refs(node):
            counts[name] += 1
            if name not in seen and name not in elsewhere and name in defs:
                seen.add(name)
                todo.append(defs[name])
    return counts, plain


def _depths(root: JsonSchema, defs: Mapping[str, JsonSchema], elsewhere: Mapping[str, str]) -> dict[str, int]:
    """Each definition reachable from `root`, with the fewest references between them (1: the root
    refers to it); a model published elsewhere is reached where it is referenced, not followed."""
    depths: dict[str, int] = {}
    level, depth = [root], 1
    while level:
        following = []
        for node in level:
            for name in _refs(node):
                if name in depths:
                    continue
                depths[name] = depth
                if name not in elsewhere and name in defs:
                    following.append(defs[name])
        level, depth = following, depth + 1
    return depths


class _Rewriter:
    """One schema's rewrite. Definitions referenced once are written in place; those referenced
    more often, or kept for other tools, go to the result's `$defs` once."""

    def __init__(
        self,
        schema: JsonSchema,
        *,
        output: bool,
        elsewhere: Mapping[str, str] | None = None,
        kept: frozenset[str] = frozenset(),
    ) -> None:
        self.defs: dict[str, JsonSchema] = schema.get("$defs", {})
        self.elsewhere = elsewhere or {}
        self.uses, plain = _reference_counts(_root(schema), self.defs, self.elsewhere)
        self.kept, self.output = kept, output
        # In a result, a model that every field holding it holds nullable is published nullable.
        models = {m for m in self.uses if "properties" in self.defs.get(m, {})}
        self.nullable = {m for m in models if output and not plain[m]}
        self.shared: dict[str, JsonSchema] = {}

    def __call__(self, root: JsonSchema) -> JsonSchema:
        out = self.node(root)
        if self.shared:
            out["$defs"] = self.shared
        return out

    def node(self, node: JsonSchema) -> JsonSchema:
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(_DEFS):
            return self.reference(ref.removeprefix(_DEFS), {k: v for k, v in node.items() if k != "$ref"})
        held = self.held_nullable(node)
        if held is not None:
            return held
        out: JsonSchema = {}
        for key, value in node.items():
            if self.dropped(key, value):
                continue
            if key in _ONE and isinstance(value, dict):
                out[key] = self.node(value)
            elif key in _MANY and isinstance(value, list):
                out[key] = [self.node(v) if isinstance(v, dict) else v for v in value]
            elif key in _MAPS and isinstance(value, dict):
                out[key] = {name: self.node(v) if isinstance(v, dict) else v for name, v in value.items()}
            else:
                out[key] = value
        return _normal_form(_untyped_enum(out) if self.output else out)

    def held_nullable(self, node: JsonSchema) -> JsonSchema | None:
        """A field that holds a model or null, where the model is published elsewhere (the field's
        words and where the model is, in one description) or nullable in `$defs` (a plain `$ref`)."""
        name = _nullable(node)
        if name is None:
            return None
        siblings = {k: v for k, v in node.items() if k != "anyOf"}
        if name in self.elsewhere and "enum" not in self.defs.get(name, {}):
            named = self.reference(name, siblings)
            return {"anyOf": [{"type": named.pop("type")}, dict(_NULL)], **named}
        if name in self.nullable and self.is_shared(name):
            return self.reference(name, siblings)
        return None

    def dropped(self, key: str, value: Any) -> bool:
        """Whether a keyword goes: a generated title, a bound at SQLite's integer limits; in a result
        also defaults, `required` lists and the type of a map's scalar values (a constexpr's value, a
        stage's seconds: the field says what they are)."""
        if key == "title" or (isinstance(value, int) and (key, value) in _STORAGE_BOUNDS):
            return True
        if not self.output:
            return False
        return key in ("default", "required") or (key == "additionalProperties" and _scalars(value))

    def reference(self, name: str, siblings: JsonSchema) -> JsonSchema:
        """A `$ref` to `name` with its sibling keywords (a field's description wins over the model's)."""
        rest = self.node(siblings) if siblings else {}
        if self.output and "enum" in self.defs[name]:
            # a value read from a result needs no list to check it; the input that takes it has one
            return {"type": self.defs[name].get("type", "string"), **rest}
        if name in self.elsewhere:
            said = rest.pop("description", "").rstrip(".")
            where = self.elsewhere[name]
            words = f"{said}: {where}." if said else f"{where[0].upper()}{where[1:]}."
            return {"type": self.defs[name].get("type", "object"), "description": words, **rest}
        if self.is_shared(name):
            if name not in self.shared:
                self.shared[name] = {}  # before the body: a recursive model refers to itself
                self.shared[name] = self.definition(name)
            return {"$ref": _DEFS + name, **rest}
        return {**self.node(self.defs[name]), **rest}

    def is_shared(self, name: str) -> bool:
        return self.uses[name] > 1 or name in self.kept

    def definition(self, name: str) -> JsonSchema:
        """A model as `$defs` publishes it: with the null its fields allow, if every one allows it."""
        body = self.node(self.defs[name])
        if name not in self.nullable:
            return body
        said = {"description": body.pop("description")} if "description" in body else {}
        return {**said, "anyOf": [body, dict(_NULL)]}


def _untyped_enum(node: JsonSchema) -> JsonSchema:
    """A string enumeration without its `type` (the values say it)."""
    if node.get("type") == "string" and all(isinstance(v, str) for v in node.get("enum", [None])):
        return {k: v for k, v in node.items() if k != "type"}
    return node


def _normal_form(node: JsonSchema) -> JsonSchema:
    """`"type": [X, "null"]` written as `anyOf: [{"type": X}, {"type": "null"}]`, and an `anyOf`
    branch `{"type": "integer"}` dropped beside `{"type": "number"}` (which admits every integer)."""
    kind = node.get("type")
    if isinstance(kind, list):
        rest = {k: v for k, v in node.items() if k not in ("type", "enum")}
        branches: list[JsonSchema] = [{"type": t} for t in kind if t != "null"]
        if "enum" in node and len(branches) == 1:
            branches[0]["enum"] = [v for v in node["enum"] if v is not None]
        if "null" in kind:
            branches.append(dict(_NULL))
        node = {"anyOf": branches, **rest} if len(branches) > 1 else {**branches[0], **rest}
    any_of = node.get("anyOf")
    if isinstance(any_of, list) and {"type": "number"} in any_of and {"type": "integer"} in any_of:
        node = {**node, "anyOf": [b for b in any_of if b != {"type": "integer"}]}
    return node
