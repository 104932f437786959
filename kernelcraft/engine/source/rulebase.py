"""What the static rules (`static.py`, `escapes.py`) are made of: a `Finding`, a rule's `Hit`,
what a rule knows of the whole module (`Candidate`), the registry (`RULES`, `rule`), and the
helpers that read names out of the AST (dotted names, strings folded from literals, a module's
attribute however it is reached: `torch.cuda.x` or `getattr(torch.cuda, "x")`).
Written by the evaluation engine only.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from kernelcraft.base.failures import FailureClass

TRY_NODES: tuple[type[ast.AST], ...] = (ast.Try, *([ast.TryStar] if hasattr(ast, "TryStar") else []))


@dataclass(frozen=True)
class Finding:
    line: int
    construct: str
    message: str
    rule: str  # the name of the rule in RULES that found it


@dataclass(frozen=True)
class Hit:
    """What a rule reports on one node; `rank` orders the hits of one statement by the imported
    name they concern (0: the statement as a whole)."""

    node: ast.AST
    construct: str
    message: str
    rank: int = 0


@dataclass(frozen=True)
class Candidate:
    """What the rules know about the whole module before they look at one node."""

    modules: dict[str, str]  # local alias -> the module (or `module.name`) it names
    defined_classes: frozenset[str]
    forward_tries: frozenset[int]  # id() of each `try` inside a `ModelNew.forward`
    imported: frozenset[str] = frozenset()
    """The names an `import` statement binds to a module (`import os`, `import torch.nn as nn`)."""
    parents: dict[int, ast.AST] = field(default_factory=dict)
    """id() of each node -> the node it sits in."""

    @classmethod
    def of(cls, tree: ast.Module) -> Candidate:
        modules: dict[str, str] = {}
        imported: set[str] = set()
        parents: dict[int, ast.AST] = {}
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                parents[id(child)] = node
            if isinstance(node, ast.Import):
                for a in node.names:
                    root = a.name.split(".")[0]
                    modules[a.asname or root] = a.name if a.asname else root
                    imported.add(a.asname or root)
            elif isinstance(node, ast.ImportFrom):
                for a in node.names:
                    modules.setdefault(a.asname or a.name, f"{node.module or ''}.{a.name}")
        classes = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
        tries = {
            id(n)
            for c in classes
            if c.name == "ModelNew"
            for item in c.body
            if isinstance(item, ast.FunctionDef) and item.name == "forward"
            for n in ast.walk(item)
            if isinstance(n, TRY_NODES)
        }
        return cls(
            modules, frozenset(c.name for c in classes), frozenset(tries), frozenset(imported), parents
        )

    def root_of(self, dotted: list[str]) -> str:
        """The module the first name of `dotted` refers to ("" for a name that is no import)."""
        return self.modules.get(dotted[0], "") if dotted else ""


Check = Callable[[ast.AST, Candidate], Iterator[Hit]]


@dataclass(frozen=True)
class Rule:
    """One anti-cheat rule: `check` yields a hit for each construct it forbids on one node;
    `rationale` says in one line why it is forbidden."""

    name: str
    rationale: str
    check: Check
    failure_class: FailureClass = FailureClass.FORBIDDEN_CONSTRUCT


RULES: list[Rule] = []  # every rule, in the order it runs on a node


def rule(name: str) -> Callable[[Check], Check]:
    """Register `check` in RULES under `name`, with its docstring as the rationale."""

    def register(check: Check) -> Check:
        RULES.append(Rule(name, (check.__doc__ or "").strip(), check))
        return check

    return register


def launches(node: ast.AST) -> bool:
    """Whether `node` contains a kernel launch (`kernel[grid](...)`)."""
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Subscript) for n in ast.walk(node))


def dotted(node: ast.AST) -> list[str]:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return list(reversed(parts))
    return []


def const_str(node: ast.AST) -> str | None:
    """The value of a string expression built only from literals ('set_' + 'stream',
    f'{"Str"}eam', "".join(["Str", "eam"]) are folded), else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = const_str(node.left), const_str(node.right)
        return left + right if left is not None and right is not None else None
    if isinstance(node, ast.JoinedStr):
        parts = []
        for v in node.values:
            inner = v.value if isinstance(v, ast.FormattedValue) else v
            text = const_str(inner)
            if text is None:
                return None
            parts.append(text)
        return "".join(parts)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "join"
        and len(node.args) == 1
        and isinstance(node.args[0], (ast.List, ast.Tuple))
    ):
        sep = const_str(node.func.value)
        items = [const_str(e) for e in node.args[0].elts]
        if sep is not None and all(i is not None for i in items):
            return sep.join(i for i in items if i is not None)
    return None


def module_attr(node: ast.AST, cand: Candidate) -> tuple[list[str], str, tuple[str, str]] | None:
    """For `a.b.c`, or `getattr(a.b, "c")`: the dotted names, the module `a` names, and (that
    module's last part, "c")."""
    got = attribute(node)
    names = [*dotted(got[0]), got[1]] if got is not None else []
    if len(names) < 2:
        return None
    root = cand.root_of(names)
    return names, root, (root.split(".")[-1] if root else names[0], names[-1])


def from_imports(node: ast.AST, names: set[tuple[str, str]]) -> Iterator[Hit]:
    """A hit for each of `names` ((module, name) pairs) that a `from os|sys|inspect import ...` takes."""
    if isinstance(node, ast.ImportFrom) and node.module in ("os", "sys", "inspect"):
        for i, a in enumerate(node.names):
            if (node.module, a.name) in names:
                yield Hit(node, f"from {node.module} import {a.name}", f"uses {node.module}.{a.name}", i + 1)


def torch_getattr(node: ast.AST, cand: Candidate) -> tuple[str, str | None] | None:
    """For `getattr(<torch module>, name)`: the target's dotted text and the name if it folds."""
    if not (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "getattr"
        and len(node.args) >= 2
        and cand.root_of(dotted(node.args[0])).startswith("torch")
    ):
        return None
    return ".".join(dotted(node.args[0])), const_str(node.args[1])


def getattr_call(node: ast.AST) -> tuple[ast.AST, str | None] | None:
    """For `getattr|hasattr|setattr|delattr(obj, name, ...)`: obj and the name if it folds."""
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("getattr", "hasattr", "setattr", "delattr")
        and len(node.args) >= 2
    ):
        return node.args[0], const_str(node.args[1])
    return None


def attribute(node: ast.AST) -> tuple[ast.AST, str] | None:
    """For `obj.name` or `getattr(obj, "name"[, default])` (a name folded from literals): obj and
    the name. Every rule about an attribute reads it through here, so `getattr` with a literal
    name reaches nothing the attribute would not."""
    if isinstance(node, ast.Attribute):
        return node.value, node.attr
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr":
        got = getattr_call(node)
        if got is not None and got[1] is not None:
            return got[0], got[1]
    return None
