"""What the search layer reads from a task module without running it: a check that it is a
KernelBench task (the engine intake's `check_task`, as every verify does), and the
operator-and-shapes key that matches it to earlier trees (warm start).

The key is the sha256 of the module's computation with comments, docstrings, formatting and
imports removed: module-level constants (the sizes), `class Model`, `get_inputs` and
`get_init_inputs`, each as `ast.unparse` prints it. Two tasks that differ only in prose or layout
share a key; a different size does not.
"""

from __future__ import annotations

import ast
import copy
import hashlib

from kernelcraft.engine import check_task

REQUIRED = ("Model", "get_inputs", "get_init_inputs")  # in the key, in this order, where a def binds them


def _stripped(stmt: ast.stmt) -> ast.stmt:
    """A copy of `stmt` without docstrings (the intake's tree is shared: never changed here)."""
    stmt = copy.deepcopy(stmt)
    for n in ast.walk(stmt):
        body = getattr(n, "body", None)
        if (
            isinstance(n, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            n.body = body[1:] or [ast.Pass()]
    return stmt


def task_key(source: str, name: str = "task.py") -> str:
    """The operator-and-shapes key of a task; a TaskError when it is not a KernelBench task, as
    the engine's intake decides it (`check_task`: one check, and one error, for a tree's start
    and for every verify of the task)."""
    tree = check_task(source, name)
    defined: dict[str, ast.stmt] = {}
    constants: list[ast.stmt] = []
    for stmt in tree.body:
        if isinstance(stmt, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and stmt.name in REQUIRED:
            defined[stmt.name] = stmt
        elif isinstance(stmt, ast.Assign | ast.AnnAssign):
            constants.append(stmt)
    kept = [*constants, *(defined[r] for r in REQUIRED if r in defined)]
    parts = [ast.unparse(_stripped(s)) for s in kept]
    return hashlib.sha256("\n".join(parts).encode("utf-8")).hexdigest()


# Calls in forward that move or view data rather than compute: they do not name the operator.
_NOT_OPERATORS = frozenset(
    """contiguous view reshape view_as reshape_as size dim numel item to float half double bfloat16 int long
    clone permute transpose t unsqueeze squeeze expand expand_as flatten cpu cuda detach type empty empty_like
    zeros zeros_like ones ones_like full full_like tensor as_tensor new_empty new_zeros stride chunk split
    unbind narrow select index_select len range tuple list super""".split()
)
_BINOPS = {
    ast.Add: "add",
    ast.Sub: "sub",
    ast.Mult: "mul",
    ast.Div: "div",
    ast.MatMult: "matmul",
    ast.Pow: "pow",
}
MAX_LABEL_CHARS = 60


def task_label(source: str) -> str:
    """A short name for a task: what its Model computes.

    The operators its forward calls, in the order they run (up to three: 'Linear + silu', with a
    module built in __init__ named by its class: `self.norm(x)` is 'LayerNorm'); failing that, the
    first clause of Model's docstring, the arithmetic in forward ('add'), the first clause of the
    module's docstring, and last 'task'. Never raises: a task that does not parse is 'task'.
    """
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return "task"
    model = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"), None)
    methods = {m.name: m for m in (model.body if model else []) if isinstance(m, ast.FunctionDef)}
    forward = methods.get("forward")
    modules = _modules_built(methods.get("__init__"))
    calls = [_operator(c, modules) for c in _in_order(forward)] if forward else []
    ops = list(dict.fromkeys(op for op in calls if op))
    if ops:
        return " + ".join(ops[:3])
    arithmetic = [
        _BINOPS[type(n.op)] for n in (ast.walk(forward) if forward else []) if isinstance(n, ast.BinOp)
    ]
    for label in (_clause(model), (arithmetic or [""])[0], _clause(tree)):
        if label:
            return label
    return "task"


def _modules_built(init: ast.FunctionDef | None) -> dict[str, str]:
    """`self.name = nn.Layer(...)` in __init__: name -> 'Layer'."""
    built: dict[str, str] = {}
    for node in ast.walk(init) if init else []:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            for target in node.targets:
                if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
                    if target.value.id == "self" and (name := _callee(node.value)):
                        built[target.attr] = name
    return built


def _in_order(node: ast.AST) -> list[ast.Call | ast.BinOp]:
    """Calls and `@` products in the order they run: arguments before the call that takes them."""
    out: list[ast.Call | ast.BinOp] = []
    for child in ast.iter_child_nodes(node):
        out += _in_order(child)
    if isinstance(node, ast.Call) or (isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult)):
        out.append(node)
    return out


def _operator(node: ast.Call | ast.BinOp, modules: dict[str, str]) -> str:
    if isinstance(node, ast.BinOp):
        return "matmul"
    func = node.func
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
        return modules.get(func.attr, func.attr)
    name = _callee(node)
    return "" if name in _NOT_OPERATORS else name


def _callee(call: ast.Call) -> str:
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def _clause(node: ast.AST | None) -> str:
    """The docstring's first clause (up to '.', ':', ';' or ' ('), at most MAX_LABEL_CHARS."""
    doc = ast.get_docstring(node) if isinstance(node, ast.ClassDef | ast.Module) else None
    if not doc:
        return ""
    first = " ".join(doc.split())
    for stop in (". ", ": ", "; ", " ("):
        first = first.split(stop, 1)[0]
    first = first.rstrip(".")
    if len(first) <= MAX_LABEL_CHARS:
        return first
    return first[: MAX_LABEL_CHARS - 1].rsplit(" ", 1)[0] + "…"
