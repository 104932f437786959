"""The tuner's axes that are not a launch's integer literals: each `tl.dot`'s input precision
(`precision_params`), a module's split precision (`split_params`) and a persistent launch's programs
per SM (`persistent_params`). `find_params` in `params.py` adds them to the launch literals it
finds.
"""

from __future__ import annotations

import ast
from typing import Any

from kernelcraft.agent.tuner.source import (
    DEFAULT_PRECISION,
    PRECISIONS,
    SPLIT_PRECISIONS,
    Assignments,
    JitFn,
    Param,
    _decorator_name,
    _int_const,
    launches,
)

PROGRAMS_PER_SM = (1, 2, 3, 4, 6, 8)
"""A persistent launch's programs per SM, the values a persistent param takes: one program an SM
is the textbook persistent kernel; more hide a program's prologue and epilogue behind another's
main loop, as long as registers and shared memory let them share an SM."""
SM_COUNT = "multi_processor_count"  # torch.cuda.get_device_properties(...).multi_processor_count


def precision_params(tree: ast.Module, offsets: Any, source: str) -> list[Param]:
    """Each `tl.dot` in a `@triton.jit` function whose precision the tuner may choose: its
    `input_precision="..."` string, or the point before the call's closing parenthesis where one
    is added (the default, TF32). A dot given `allow_tf32=` (deprecated), a precision that is not a
    string literal, or `out_dtype=` of an integer dot is left alone."""
    out: list[Param] = []
    for fn in tree.body:
        if not isinstance(fn, ast.FunctionDef) or "jit" not in {
            _decorator_name(d) for d in fn.decorator_list
        }:
            continue
        for node in ast.walk(fn):
            if not (isinstance(node, ast.Call) and _decorator_name(node.func) == "dot"):
                continue
            kw = {k.arg: k.value for k in node.keywords if k.arg}
            if "allow_tf32" in kw or "out_dtype" in kw or any(k.arg is None for k in node.keywords):
                continue
            key = f"{fn.name}.dot@{node.lineno}:{node.col_offset}.input_precision"
            given = kw.get("input_precision")
            if given is None:
                end = offsets.at(node.end_lineno or node.lineno, (node.end_col_offset or 1) - 1)
                comma = "" if source[:end].rstrip().endswith(",") else ", "
                out.append(
                    Param(key, "precision", DEFAULT_PRECISION, end, end, node.lineno, fn.name, 0, comma)
                )
            elif isinstance(given, ast.Constant) and given.value in PRECISIONS:
                start, end = offsets.span(given)
                out.append(
                    Param(
                        key, "precision", PRECISIONS.index(given.value), start, end, node.lineno, fn.name, 0
                    )
                )
    return out


def split_params(module: Assignments, offsets: Any) -> list[Param]:
    """A module constant whose name says PRECISION and whose value is one of `SPLIT_PRECISIONS`
    (the cookbook GEMMs' `PRECISION = "bf16x3"`): how the kernel splits its fp32 operands before
    its dots. Assigned once in the module's scope (`module`, from `assignments`), as a string
    literal; anything else is left alone."""
    out: list[Param] = []
    for name, nodes in module.items():
        value = nodes[0].value
        if "PRECISION" not in name.upper() or len(nodes) != 1 or not isinstance(value, ast.Constant):
            continue
        if value.value in SPLIT_PRECISIONS:
            start, end = offsets.span(value)
            out.append(
                Param(name, "split", SPLIT_PRECISIONS.index(value.value), start, end, value.lineno, "", 0)
            )
    return out


def _mentions_sm_count(node: ast.AST, names: Assignments, helpers: set[str]) -> bool:
    """Whether `node` reads the SM count: `.multi_processor_count`, a name assigned once from an
    expression that does, or a call of a module function whose body does (`_sm_count(device)`)."""
    for n in ast.walk(node):
        if isinstance(n, ast.Attribute) and n.attr == SM_COUNT:
            return True
        if isinstance(n, ast.Name) and len(defs := names.get(n.id, [])) == 1:
            if _mentions_sm_count(defs[0].value, {k: v for k, v in names.items() if k != n.id}, helpers):
                return True
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in helpers:
            return True
    return False


def _sm_factor(node: ast.BinOp, names: Assignments, helpers: set[str]) -> ast.expr | None:
    """The integer literal of `SM count * k` (or `k * SM count`), else None."""
    if not isinstance(node.op, ast.Mult):
        return None
    for literal, other in ((node.right, node.left), (node.left, node.right)):
        if _int_const(literal) is not None and _mentions_sm_count(other, names, helpers):
            return literal
    return None


def persistent_params(
    tree: ast.Module, jit: dict[str, JitFn], module: Assignments, offsets: Any, source: str
) -> list[Param]:
    """How many programs an SM each persistent launch's grid asks for. A launch is persistent when
    its grid (followed through names assigned once, lambdas included) reads the SM count. Its
    factor is the literal of `SM count * k`; where the grid reads the SM count with no factor, the
    param spans that read and, set to k > 1, writes it as `(read * k)`. Uses of the SM count outside
    a grid (a heuristic that compares it with a tile count) are left alone."""
    helpers = {
        fn.name
        for fn in tree.body
        if isinstance(fn, ast.FunctionDef)
        and fn.name not in jit
        and any(isinstance(n, ast.Attribute) and n.attr == SM_COUNT for n in ast.walk(fn))
    }
    out: dict[tuple[int, int], Param] = {}
    for launch in launches(tree, jit):
        names = {**module, **launch.local}
        grid = launch.call.func.slice if isinstance(launch.call.func, ast.Subscript) else None
        if grid is None or not _mentions_sm_count(grid, names, helpers):
            continue
        todo: list[ast.AST] = [grid]
        seen: set[str] = set()
        while todo:
            node = todo.pop()
            factors = [
                b for b in ast.walk(node) if isinstance(b, ast.BinOp) and _sm_factor(b, names, helpers)
            ]
            covered = {id(n) for b in factors for n in ast.walk(b)}
            for b in factors:
                literal = _sm_factor(b, names, helpers)
                value = _int_const(literal)
                if literal is not None and value in PROGRAMS_PER_SM:
                    start, end = offsets.span(literal)
                    key = f"{launch.kernel}.programs_per_sm@{literal.lineno}"
                    param = Param(
                        key, "persistent", value, start, end, literal.lineno, launch.kernel, floor=1
                    )
                    out.setdefault((start, end), param)
            for n in ast.walk(node):
                if id(n) in covered:
                    continue
                if isinstance(n, ast.Name) and n.id not in seen and len(names.get(n.id, [])) == 1:
                    seen.add(n.id)
                    if _mentions_sm_count(names[n.id][0].value, names, helpers):
                        todo.append(names[n.id][0].value)
                    continue
                bare = (isinstance(n, ast.Attribute) and n.attr == SM_COUNT) or (
                    isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in helpers
                )
                if bare and isinstance(n, ast.expr):
                    start, end = offsets.span(n)
                    key = f"{launch.kernel}.programs_per_sm@{n.lineno}"
                    out.setdefault(
                        (start, end),
                        Param(
                            key,
                            "persistent",
                            1,
                            start,
                            end,
                            n.lineno,
                            launch.kernel,
                            floor=1,
                            insert=source[start:end],
                        ),
                    )
                    covered |= {id(m) for m in ast.walk(n)}
    return list(out.values())
