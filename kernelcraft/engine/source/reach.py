"""Control flow of the candidate's Python that a shrunk run may not have reached at full size.

In the interpreter a large task runs at shrunk sizes (`source/shrink.py`): a branch of forward, of
a host helper or of an autotune/heuristics lambda on a size (`if N <= 4096:`, `BLOCK = min(1024,
...)`, `for k in range(K // BLOCK_K)`) may take another way at the task's own sizes, which the
verdict then says nothing about. This pass reads the candidate's source (`ast` only, in the
parent: nothing of it runs) and names each such line with the sizes that tell the two apart.

Size-derived values: names assigned (in a function, a lambda or a method) from an expression that
reads `.shape`, `.size()`, `.numel()`, `.stride()`, `len()`, a string-keyed subscript of a
heuristics or autotune lambda's argument (`args["N"]`, `META["BLOCK"]`), an attribute of `self`
set in `__init__` from its arguments, or another size-derived name. Control flow: `if`, `while`,
conditional expressions, a lambda that returns a comparison (`@triton.heuristics`), `min()`/`max()`
with a literal, and `for ... in range(...)`. A test that
reads one size-derived value and otherwise literals is evaluated at each pair of sizes the shrink
changed (a rewritten constant, an input's dimension or element count: `pairs`), trial and full
side by side; it is named when the two disagree (for a loop: when the trials ran its body at most
once and the full size more). A test reading two or more sizes, or calling anything else, is not
evaluated and is listed as such.

Which size a name holds is known when it is read straight from one dimension (`N = x.shape[0]`,
`B, N = x.shape`, `x.size(1)`) or an element count (`x.numel()`): then only the pairs of that kind
are tried on it (a batch of 8 is no longer tested at a numel of 536870912). Limits: otherwise
every changed pair is tried on it (a warning may name a size the line never sees); values reached through helper functions' parameters, globals,
containers or Triton's own autotuning are not followed; the kernels' bodies (`@triton.jit`) are
not read (their loops run on the GPU as in the interpreter).
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Any

Pair = tuple[str, int, int]
"""(what the size is, its value in the trials, its value at the task's own sizes)."""

_SIZE_CALLS = {"size", "numel", "stride"}
_META_ARGS = {"args", "META", "meta", "nargs", "kwargs", "named_args"}
_BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.LShift: operator.lshift,
    ast.RShift: operator.rshift,
    ast.Div: operator.truediv,
}
_CMPOPS: dict[type, Callable[[Any, Any], bool]] = {
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
}
_FUNCS: dict[str, Callable[..., Any]] = {
    "min": min,
    "max": max,
    "cdiv": lambda a, b: -(-a // b),
    "next_power_of_2": lambda n: 1 << max(0, int(n) - 1).bit_length(),
    "int": int,
    "abs": abs,
    "ceil": math.ceil,
}
MAX_SOURCE_CHARS = 400_000


def _call_name(node: ast.Call) -> str | None:
    f = node.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None


class _Function:
    """One function's size-derived names and its size sources."""

    def __init__(self, fn: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda, self_sizes: set[str]) -> None:
        self.self_sizes = self_sizes
        self.names: set[str] = set()
        self.origin: dict[str, str] = {}
        """A name read straight from one dimension ("dim 1": `N = x.shape[1]`, `B, N = x.shape`,
        `x.size(1)`) or an element count ("numel"): only the pairs of that kind are tried on it."""
        if isinstance(fn, ast.Lambda):  # a heuristics lambda: `lambda args: ...`
            return
        for _ in range(3):  # assignments in any order: a few passes reach a fixed point
            for node in ast.walk(fn):
                value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)) else None
                if value is None or not self.sources(value):
                    continue
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]  # type: ignore[attr-defined]
                for t in targets:
                    self.names |= {n.id for n in ast.walk(t) if isinstance(n, ast.Name)}
                    if isinstance(node, ast.Assign):
                        self._note_origin(t, value)

    def _note_origin(self, target: ast.AST, value: ast.AST) -> None:
        if isinstance(target, ast.Name) and (kind := origin(value)) is not None:
            self.origin[target.id] = kind
        elif isinstance(target, ast.Tuple) and isinstance(value, ast.Attribute) and value.attr == "shape":
            for i, elt in enumerate(target.elts):  # `B, N = x.shape`
                if isinstance(elt, ast.Name):
                    self.origin[elt.id] = f"dim {i}"

    def kind(self, node: ast.AST) -> str | None:
        """What size a read holds, when it is one dimension or an element count."""
        return self.origin.get(node.id) if isinstance(node, ast.Name) else origin(node)

    def is_source(self, node: ast.AST) -> bool:
        """A size read directly: `x.shape`, `x.size(1)`, `len(x)`, `args["N"]`, `self.dim`, a name."""
        if isinstance(node, ast.Name):
            return node.id in self.names
        if isinstance(node, ast.Attribute):
            if node.attr == "shape":
                return True
            return (
                isinstance(node.value, ast.Name) and node.value.id == "self" and node.attr in self.self_sizes
            )
        if isinstance(node, ast.Call):
            name = _call_name(node)
            return (name in _SIZE_CALLS and isinstance(node.func, ast.Attribute)) or name == "len"
        if isinstance(node, ast.Subscript):
            key = node.slice
            return (
                isinstance(node.value, ast.Name)
                and node.value.id in _META_ARGS
                and isinstance(key, ast.Constant)
                and isinstance(key.value, str)
            )
        return False

    def sources(self, expr: ast.AST) -> list[ast.AST]:
        """The outermost size reads in `expr` (`x.shape[1]` once, not also `x.shape`)."""
        found: list[ast.AST] = []

        def visit(node: ast.AST) -> None:
            if isinstance(node, ast.Subscript) and self.is_source(node.value) and not self.is_source(node):
                found.append(node)  # x.shape[1]
                return
            if self.is_source(node):
                found.append(node)
                return
            for child in ast.iter_child_nodes(node):
                visit(child)

        visit(expr)
        return found


def origin(node: ast.AST) -> str | None:
    """ "dim k" for `x.shape[k]` or `x.size(k)` (k a literal at least 0), "numel" for `x.numel()`."""
    if (
        isinstance(node, ast.Subscript)
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "shape"
    ):
        k = node.slice
        if isinstance(k, ast.Constant) and type(k.value) is int and k.value >= 0:
            return f"dim {k.value}"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        if node.func.attr == "numel" and not node.args:
            return "numel"
        if node.func.attr == "size" and len(node.args) == 1:
            k = node.args[0]
            if isinstance(k, ast.Constant) and type(k.value) is int and k.value >= 0:
                return f"dim {k.value}"
    return None


def _evaluate(expr: ast.AST, source: ast.AST, value: int) -> Any:
    """`expr` with the size read `source` replaced by `value`; ValueError when it reads anything
    else than literals and the functions above."""
    if expr is source or ast.dump(expr) == ast.dump(source):
        return value
    if isinstance(expr, ast.Constant) and isinstance(expr.value, (int, float, bool)):
        return expr.value
    if isinstance(expr, ast.BinOp) and type(expr.op) in _BINOPS:
        return _BINOPS[type(expr.op)](
            _evaluate(expr.left, source, value), _evaluate(expr.right, source, value)
        )
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, (ast.USub, ast.Not)):
        v = _evaluate(expr.operand, source, value)
        return -v if isinstance(expr.op, ast.USub) else not v
    if isinstance(expr, ast.BoolOp):
        vals = [_evaluate(v, source, value) for v in expr.values]
        return all(vals) if isinstance(expr.op, ast.And) else any(vals)
    if isinstance(expr, ast.Compare) and all(type(op) in _CMPOPS for op in expr.ops):
        left = _evaluate(expr.left, source, value)
        for op, right_node in zip(expr.ops, expr.comparators, strict=True):
            right = _evaluate(right_node, source, value)
            if not _CMPOPS[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(expr, ast.Call) and _call_name(expr) in _FUNCS and not expr.keywords:
        return _FUNCS[str(_call_name(expr))](*[_evaluate(a, source, value) for a in expr.args])
    raise ValueError("not evaluable")


def _self_sizes(tree: ast.Module) -> set[str]:
    """Attributes of `self` that `__init__` sets from its arguments (the sizes `get_init_inputs` gives)."""
    out: set[str] = set()
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef) and fn.name == "__init__":
            params = {a.arg for a in fn.args.args[1:]}
            for node in ast.walk(fn):
                if isinstance(node, ast.Assign) and params & {
                    n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)
                }:
                    for t in node.targets:
                        if (
                            isinstance(t, ast.Attribute)
                            and isinstance(t.value, ast.Name)
                            and t.value.id == "self"
                        ):
                            out.add(t.attr)
    return out


def _is_kernel(fn: ast.AST) -> bool:
    decorators = getattr(fn, "decorator_list", [])
    return any("jit" in ast.unparse(d) for d in decorators)


def unreached(source: str, pairs: list[Pair]) -> tuple[list[str], list[str]]:
    """(the lines whose control flow takes another way at some pair's full size, each with the
    sizes; the size-dependent lines that could not be evaluated). Empty when nothing changed or
    the source does not parse."""
    pairs = [p for p in pairs if p[1] != p[2]]
    if not pairs or len(source) > MAX_SOURCE_CHARS:
        return [], []
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return [], []
    self_sizes = _self_sizes(tree)
    warnings: dict[int, str] = {}
    unknown: dict[int, str] = {}
    functions = [
        n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
    ]
    kernels = [f for f in functions if _is_kernel(f)]
    # a kernel's body (not its decorators: the heuristics lambdas are host code)
    inside_kernel = {id(n) for k in kernels for stmt in getattr(k, "body", []) for n in ast.walk(stmt)}
    inside_kernel |= {id(k) for k in kernels}
    for fn in functions:
        if id(fn) in inside_kernel:
            continue
        scope = _Function(fn, self_sizes if not isinstance(fn, ast.Lambda) else set())
        for node in ast.walk(fn):
            if id(node) in inside_kernel:
                continue
            for test, kind in _tests(node):
                found = scope.sources(test)
                if not found:
                    continue
                line = getattr(node, "lineno", 0)
                text = ast.unparse(node if kind == "minmax" else test)[:120]
                if len({ast.dump(s) for s in found}) > 1:
                    unknown.setdefault(line, f"line {line} `{text}`")
                    continue
                size = scope.kind(found[0])  # N = x.shape[0]: the inputs' dim 0 pairs, not the numel
                tried = pairs if size is None else [p for p in pairs if p[0].endswith(size)]
                try:
                    said = _differs(test, found[0], tried, kind)
                except (ValueError, TypeError, ZeroDivisionError, OverflowError):
                    unknown.setdefault(line, f"line {line} `{text}`")
                    continue
                if said is not None:
                    warnings.setdefault(line, f"line {line} `{text}`: {said}")
    return [warnings[k] for k in sorted(warnings)], [unknown[k] for k in sorted(unknown)]


def _tests(node: ast.AST) -> list[tuple[ast.AST, str]]:
    if isinstance(node, (ast.If, ast.While, ast.IfExp)):
        return [(node.test, "branch")]
    if isinstance(node, ast.Lambda) and isinstance(node.body, (ast.Compare, ast.BoolOp)):
        return [(node.body, "branch")]  # a heuristics lambda choosing a kernel's code path
    if isinstance(node, ast.For) and isinstance(node.iter, ast.Call) and _call_name(node.iter) == "range":
        return [(node.iter, "loop")]
    if isinstance(node, ast.Call) and _call_name(node) in ("min", "max") and len(node.args) >= 2:
        if any(isinstance(a, ast.Constant) for a in node.args):
            return [(node, "minmax")]
    return []


def _differs(test: ast.AST, source: ast.AST, pairs: list[Pair], kind: str) -> str | None:
    for label, trial, full in pairs:
        if kind == "loop":
            assert isinstance(test, ast.Call)
            args = (
                [_evaluate(a, source, trial) for a in test.args],
                [_evaluate(a, source, full) for a in test.args],
            )
            small, large = len(range(*args[0])), len(range(*args[1]))
            if small <= 1 < large:
                return (
                    f"runs {small} time(s) at the trials' {label} = {trial} and {large} at the task's {full}"
                )
            continue
        if kind == "minmax":
            assert isinstance(test, ast.Call)
            small_which = [_evaluate(a, source, trial) for a in test.args]
            large_which = [_evaluate(a, source, full) for a in test.args]
            pick = min if _call_name(test) == "min" else max
            a, b = small_which.index(pick(small_which)), large_which.index(pick(large_which))
            if a != b:
                return (
                    f"takes argument {a + 1} at the trials' {label} = {trial} and argument {b + 1} at the "
                    f"task's {full}"
                )
            continue
        small_v, large_v = bool(_evaluate(test, source, trial)), bool(_evaluate(test, source, full))
        if small_v != large_v:
            return f"is {small_v} at the trials' {label} = {trial} and {large_v} at the task's {full}"
    return None


def note(source: str, pairs: list[Pair]) -> list[str]:
    """The verdict's notes on the candidate's control flow at the task's own sizes."""
    warnings, unknown = unreached(source, pairs)
    out = []
    if warnings:
        out.append(
            "the trials ran at shrunk sizes; at the task's own sizes the candidate's Python may take "
            "another way, not checked here: " + "; ".join(warnings[:6])
        )
    if unknown:
        out.append(
            "branches on sizes this check could not evaluate (they may differ at the task's own sizes): "
            + "; ".join(unknown[:6])
        )
    return [n[:1200] for n in out]
