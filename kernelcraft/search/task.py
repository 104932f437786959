"""What the search layer reads from a task module without running it: a check that it is a
KernelBench task, and the operator-and-shapes key that matches it to earlier trees (warm start).

The key is the sha256 of the module's computation with comments, docstrings, formatting and
imports removed: module-level constants (the sizes), `class Model`, `get_inputs` and
`get_init_inputs`, each as `ast.unparse` prints it. Two tasks that differ only in prose or layout
share a key; a different size does not.
"""

from __future__ import annotations

import ast
import hashlib

from kernelcraft.base.errors import TaskError

REQUIRED = ("Model", "get_inputs", "get_init_inputs")


def _strip_docstrings(node: ast.AST) -> None:
    for n in ast.walk(node):
        body = getattr(n, "body", None)
        if (
            isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            n.body = body[1:] or [ast.Pass()]


def task_key(source: str, name: str = "task.py") -> str:
    """The operator-and-shapes key of a task; a TaskError when it is not a KernelBench task."""
    try:
        tree = ast.parse(source, filename=name)
    except SyntaxError as e:
        raise TaskError(f"the task does not parse: {e.msg}; fix the syntax", path=name, line=e.lineno) from e
    _strip_docstrings(tree)
    defined: dict[str, ast.stmt] = {}
    constants: list[ast.stmt] = []
    for stmt in tree.body:
        if isinstance(stmt, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and stmt.name in REQUIRED:
            defined[stmt.name] = stmt
        elif isinstance(stmt, ast.Assign | ast.AnnAssign):
            constants.append(stmt)
    missing = [r for r in REQUIRED if r not in defined]
    if missing:
        raise TaskError(
            f"the task lacks {', '.join(missing)}; a task is a KernelBench module with class Model(nn.Module), "
            "get_inputs() and get_init_inputs()",
            path=name,
        )
    parts = [ast.unparse(s) for s in constants] + [ast.unparse(defined[r]) for r in REQUIRED]
    return hashlib.sha256("\n".join(parts).encode("utf-8")).hexdigest()
