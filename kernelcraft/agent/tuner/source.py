"""Reading a candidate's source for the offline tuner: what a tunable literal is (`Param`), the
`@triton.jit` functions (`jit_functions`), the plain assignments of a scope (`assignments`), the
launches (`launches`) and which argument binds to which kernel parameter (`launch_arguments`).
`params.py` decides which literals are tunable; `axes.py` finds the axes that are not
a launch's literals (a dot's precision, a persistent grid's programs per SM).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from itertools import takewhile
from typing import Literal

ParamKind = Literal["num_warps", "num_stages", "meta", "precision", "split", "persistent"]
Assignments = dict[str, list[ast.Assign]]  # name -> every plain `name = ...` of one scope

NUM_WARPS = (1, 2, 4, 8, 16)
DEFAULT_WARPS = 4  # what a launch that sets no num_warps runs with on NVIDIA
NUM_STAGES = (1, 2, 3, 4, 5)
META_MIN = 2  # 1 is a flag value, not a tile: find_params skips it
MIN_DOT_DIM = 16  # tl.dot rejects an operand dimension under 16 ("Input shapes should have M >= 16...")
LAUNCH_OPTIONS = ("num_warps", "num_stages")
CONFIG_PARAMETERS = ("kwargs", "num_warps", "num_stages")  # triton.Config's first three, in order
PRECISIONS = ("ieee", "tf32x3", "tf32")
"""A `tl.dot`'s input_precision values, from exact to loosest, as a precision param's values index
them: IEEE fp32 (CUDA cores), 3xTF32 (near fp32 on tensor cores), TF32 (10 mantissa bits: Triton's
default for fp32 operands on NVIDIA). Verify decides which the task's tolerance allows."""
DEFAULT_PRECISION = 2  # a tl.dot without input_precision (or allow_tf32) runs TF32 on NVIDIA
SPLIT_PRECISIONS = ("tf32x3", "bf16x3")
"""The values of a module constant naming how a kernel splits its fp32 operands before its dots (the
cookbook GEMMs' `PRECISION`): TF32 parts (22 bits, near fp32) or bfloat16 parts (16 bits, twice as
fast). Verify decides which the task's tolerance allows."""


@dataclass(frozen=True)
class Param:
    """One tunable integer literal. `start:end` is its character span in the source."""

    key: str
    kind: ParamKind
    value: int
    start: int
    end: int
    line: int
    launch: str  # the kernel whose launch it configures ("" for a constant used by several)
    floor: int = META_MIN  # the least value proposed (MIN_DOT_DIM in a kernel that calls tl.dot)
    insert: str | None = (
        None  # precision, num_warps: what goes before the added keyword; persistent: the SM count's text
    )
    config: int | None = None  # in an autotuned kernel's i-th triton.Config: its tile is limited alone
    name: str = ""  # the kernel parameter or launch option it sets (BLOCK_M, num_warps)
    alone: bool = False  # one branch's value, or a cap in an expression: no part of the launch's tile
    axis: str = ""  # what it moves ("tile M", "warps", "split-K", ...): `family.axis_of`
    rank: int = 0  # its axis's place among what matters for the kernel's family (0 first)

    def text(self, value: int) -> str:
        """The source text `value` stands for in this param's span."""
        if self.kind == "persistent" and self.insert is not None:  # an SM count with no factor yet
            return self.insert if value == 1 else f"({self.insert} * {value})"
        if self.kind == "split":
            return f'"{SPLIT_PRECISIONS[value]}"' if 0 <= value < len(SPLIT_PRECISIONS) else '"?"'
        if self.kind == "num_warps" and self.insert is not None:  # a launch that set none: added
            return f"{self.insert}num_warps={value}"
        if self.kind != "precision":
            return str(value)
        name = f'"{PRECISIONS[value]}"' if 0 <= value < len(PRECISIONS) else '"?"'
        return name if self.insert is None else f"{self.insert}input_precision={name}"


@dataclass
class JitFn:
    """A `@triton.jit` function of the module, as far as the tuner cares."""

    params: list[str]
    constexpr: set[str]
    defaults: dict[str, ast.expr]
    autotuned: bool
    uses_dot: bool
    configs: ast.expr | None = None  # what @triton.autotune is given as configs


@dataclass(frozen=True)
class Launch:
    """One `kernel[grid](...)` call, with the constants of the function it is in."""

    call: ast.Call
    kernel: str
    fn: JitFn | None  # None: a kernel imported from elsewhere
    scope: str  # the enclosing function's name; "" at module level
    local: Assignments
    node: ast.AST | None = None  # the enclosing function (the module at module level)


def _is_pow2(v: int) -> bool:
    return v >= 1 and (v & (v - 1)) == 0


def _int_const(node: ast.AST | None) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    return None


def _is_constexpr_annotation(node: ast.AST | None) -> bool:
    if isinstance(node, ast.Attribute):
        return node.attr == "constexpr"
    if isinstance(node, ast.Name):
        return node.id == "constexpr"
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.endswith("constexpr")
    return False


def _argument(call: ast.Call, position: int, name: str) -> ast.expr | None:
    """The argument `call` passes as `name=`, or at `position` before any `*args`."""
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value
    args = list(takewhile(lambda a: not isinstance(a, ast.Starred), call.args))
    return args[position] if position < len(args) else None


def _decorator_name(node: ast.AST) -> str:
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return ""


class _Offsets:
    """ast positions (line, UTF-8 byte column) to character offsets in the source string."""

    def __init__(self, source: str) -> None:
        self.lines = source.splitlines(keepends=True)
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))

    def at(self, lineno: int, col: int) -> int:
        line = self.lines[lineno - 1]
        return self.starts[lineno - 1] + len(line.encode("utf-8")[:col].decode("utf-8", errors="replace"))

    def span(self, node: ast.expr) -> tuple[int, int]:
        end = self.at(node.end_lineno or node.lineno, node.end_col_offset or 0)
        return self.at(node.lineno, node.col_offset), end


def jit_functions(tree: ast.Module) -> dict[str, JitFn]:
    """The module-level `@triton.jit` functions: only their signatures say which arguments are
    constexpr. A function uses a dot when it calls `tl.dot` or a module jit function that does (a
    GEMM whose main loop is a helper's)."""
    out: dict[str, JitFn] = {}
    calls: dict[str, set[str]] = {}
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef):
            continue
        names = {_decorator_name(d) for d in node.decorator_list}
        if "jit" not in names:
            continue
        args = node.args.posonlyargs + node.args.args
        autotune = [
            d for d in node.decorator_list if isinstance(d, ast.Call) and _decorator_name(d) == "autotune"
        ]
        defaults = dict(
            zip([a.arg for a in args][len(args) - len(node.args.defaults) :], node.args.defaults, strict=True)
        )
        out[node.name] = JitFn(
            params=[a.arg for a in args],
            constexpr={a.arg for a in args if _is_constexpr_annotation(a.annotation)},
            defaults=defaults,
            autotuned=bool(names & {"autotune", "heuristics"}),
            uses_dot=any(
                isinstance(n, ast.Call) and _decorator_name(n.func) in ("dot", "dot_scaled")
                for n in ast.walk(node)
            ),
            configs=_argument(autotune[0], 0, "configs") if autotune else None,
        )
        calls[node.name] = {
            n.func.id for n in ast.walk(node) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
        }
    changed = True
    while changed:
        changed = False
        for name, fn in out.items():
            if not fn.uses_dot and any(out[c].uses_dot for c in calls[name] if c in out):
                out[name] = replace(fn, uses_dot=True)
                changed = True
    return out


def assignments(body: Iterable[ast.stmt]) -> Assignments:
    """Plain `name = value` statements of one scope, not counting nested functions and classes."""
    found: Assignments = {}
    for stmt in body:
        for node in ast.walk(stmt) if not isinstance(stmt, ast.FunctionDef | ast.ClassDef) else ():
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
            ):
                found.setdefault(node.targets[0].id, []).append(node)
    return found


def launch_name(call: ast.Call) -> str | None:
    """`kernel[grid](...)` and `mod.kernel[grid](...)` launch `kernel`; any other call is no launch."""
    func = call.func
    if not isinstance(func, ast.Subscript):
        return None
    target = func.value
    if isinstance(target, ast.Name):
        return target.id
    if isinstance(target, ast.Attribute):
        return target.attr
    return None


def launches(tree: ast.Module, jit: dict[str, JitFn]) -> Iterator[Launch]:
    """Launches in module-level code, then in each function that is not a kernel (a launch in a
    nested function is seen from both); an autotuned kernel's are skipped, as @triton.autotune picks
    its own configs."""
    scopes: list[tuple[str, ast.AST]] = [("", tree)]
    scopes += [(n.name, n) for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name not in jit]
    for scope_name, scope in scopes:
        local = assignments(scope.body) if isinstance(scope, ast.FunctionDef) else {}
        nodes = (
            ast.walk(scope)
            if scope_name
            else (
                n
                for stmt in tree.body
                if not isinstance(stmt, ast.FunctionDef | ast.ClassDef)
                for n in ast.walk(stmt)
            )
        )
        for node in nodes:
            if not isinstance(node, ast.Call) or (kernel := launch_name(node)) is None:
                continue
            fn = jit.get(kernel)
            if fn is None or not fn.autotuned:
                yield Launch(node, kernel, fn, scope_name, local, scope)


def launch_arguments(launch: Launch) -> list[tuple[str, ast.expr]]:
    """(kernel parameter, argument) pairs: by position for a kernel defined here, by keyword for any."""
    pairs: list[tuple[str, ast.expr]] = []
    if launch.fn is not None:
        params = launch.fn.params
        pairs += [(params[i], a) for i, a in enumerate(launch.call.args) if i < len(params)]
    pairs += [(kw.arg, kw.value) for kw in launch.call.keywords if kw.arg is not None]
    return pairs
