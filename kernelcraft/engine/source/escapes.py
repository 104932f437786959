"""Static rules that close the ways to reach a builtin or a module without naming it.

`static.py`'s rules forbid what a candidate names (`import inspect`, `sys.modules`, `torch._C`).
The way around a rule about a name is not to name it: an alias (`g = getattr`), an attribute of
something else (`torch.sys.modules`, `os.sys`, a builtin's `__self__`, `torch.__builtins__`),
a key (`...["__import__"]`), a module handed around as a value (`m = sys`), or a string that
something evaluates or imports (typing's annotations, a pickle). These rules close each of those
ways by its shape, whatever name it leads to:

- `builtin-alias`: getattr, setattr and delattr are only ever called directly;
- `dunder-attribute`: no dunder attribute or dunder string key beyond a short list;
- `module-reach`: no module reached as an attribute or from-import of another (`torch.sys`), and
  no imported module used as a value (only as the base of an attribute);
- `string-evaluation`: nothing that imports, unpickles or evaluates by a name in a string;
- `process-spawn`: no process or program started through `os` (as `subprocess` would).

Registered in `rulebase.RULES` (imported by `static.py`). Written by the evaluation engine only.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from kernelcraft.engine.source.forbidden import (
    ALLOWED_DUNDERS,
    ATTRIBUTE_BUILTINS,
    EVALUATING_ATTRS,
    INTROSPECTION_ATTRS,
    PICKLE_LOADERS,
    PROCESS_ATTRS,
    REACH_ATTRS,
)
from kernelcraft.engine.source.rulebase import Candidate, Hit, attribute, const_str, dotted, rule


def _dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


@rule("builtin-alias")
def builtin_alias(node: ast.AST, cand: Candidate) -> Iterator[Hit]:
    """getattr, setattr and delattr held as a value (an alias, an argument, a default) hide every later use."""
    if not (isinstance(node, ast.Name) and node.id in ATTRIBUTE_BUILTINS):
        return
    parent = cand.parents.get(id(node))
    if isinstance(node.ctx, ast.Load) and isinstance(parent, ast.Call) and parent.func is node:
        return
    yield Hit(node, node.id, f"holds {node.id} as a value; call it directly with the object in hand")


@rule("dunder-attribute")
def dunder_attribute(node: ast.AST, cand: Candidate) -> Iterator[Hit]:
    """Dunder attributes and keys (__builtins__, __import__, a builtin's __self__, __loader__) reach the interpreter's machinery."""
    got = attribute(node)
    if isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)) and _dunder(node.attr):
        if node.attr not in INTROSPECTION_ATTRS:  # (x.__class__ = ...: a tensor that runs code when read)
            yield Hit(
                node, f".{node.attr}", f"assigns .{node.attr}: the interpreter's machinery is off limits"
            )
        return
    if got is not None:
        name = got[1]
        if _dunder(name) and name not in ALLOWED_DUNDERS and name not in INTROSPECTION_ATTRS:
            yield Hit(node, f".{name}", f"reads .{name}: the interpreter's machinery is off limits")
        return
    if isinstance(node, ast.Subscript):
        key = const_str(node.slice)
        if key is not None and _dunder(key) and key not in ALLOWED_DUNDERS:
            yield Hit(node, f"[{key!r}]", f"looks up {key!r}: the interpreter's machinery is off limits")


@rule("module-reach")
def module_reach(node: ast.AST, cand: Candidate) -> Iterator[Hit]:
    """A module reached as another's attribute (torch.sys, os.sys) or held as a value (m = sys) escapes every rule that names it."""
    got = attribute(node)
    if got is not None and got[1] in REACH_ATTRS:
        yield Hit(node, f".{got[1]}", f"reaches the module {got[1]} through another object")
    if isinstance(node, ast.ImportFrom) and node.level == 0:
        for i, a in enumerate(node.names):
            if a.name in REACH_ATTRS:
                yield Hit(
                    node,
                    f"from {node.module} import {a.name}",
                    f"takes the module {a.name} from {node.module}",
                    i + 1,
                )
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in cand.imported:
        parent = cand.parents.get(id(node))
        if not (isinstance(parent, ast.Attribute) and parent.value is node) and not _attribute_of(
            parent, node
        ):
            yield Hit(node, node.id, f"uses the module {node.id} as a value; use only its attributes")


@rule("string-evaluation")
def string_evaluation(node: ast.AST, cand: Candidate) -> Iterator[Hit]:
    """Importing, unpickling or evaluating by a name in a string (import_module, torch.load, get_type_hints) runs what no rule read."""
    got = attribute(node)
    if got is None:
        return
    name = got[1]
    if ("import" in name.lower() and not _dunder(name)) or name in EVALUATING_ATTRS:
        yield Hit(node, f".{name}", f"uses .{name}, which imports or evaluates by a name in a string")
        return
    names = dotted(got[0])
    root = cand.root_of(names).split(".")[0] if names else ""
    if (root, name) in PICKLE_LOADERS:
        yield Hit(
            node,
            f"{'.'.join(names)}.{name}",
            f"uses {root}.{name}, which unpickles: a pickle imports what it names",
        )


def _attribute_of(parent: ast.AST | None, node: ast.AST) -> bool:
    """Whether `node` is the object of `getattr(node, ...)` or `hasattr(node, ...)` (which the
    attribute rules read as `node.name`)."""
    return (
        isinstance(parent, ast.Call)
        and isinstance(parent.func, ast.Name)
        and parent.func.id in ("getattr", "hasattr", "setattr", "delattr")
        and bool(parent.args)
        and parent.args[0] is node
    )


@rule("process-spawn")
def process_spawn(node: ast.AST, cand: Candidate) -> Iterator[Hit]:
    """A process or program started through os (system, fork, exec, spawn) works out of every recorder's sight."""
    if isinstance(node, ast.ImportFrom) and node.module == "os":
        for i, a in enumerate(node.names):
            if a.name in PROCESS_ATTRS:
                yield Hit(
                    node, f"from os import {a.name}", f"takes os.{a.name}, which starts a process", i + 1
                )
        return
    got = attribute(node)
    if got is None or got[1] not in PROCESS_ATTRS:
        return
    names = dotted(got[0])
    if names and cand.root_of(names) == "os":
        yield Hit(node, f"{'.'.join(names)}.{got[1]}", f"uses os.{got[1]}, which starts a process")
