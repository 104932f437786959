"""Which axes matter for a kernel: its family read from the source (`kernel_family`), the axis each
tunable literal moves along (`axis_of`) and the order the search tries them in (`FAMILY_AXES`).

A GEMM-like kernel (one that calls `tl.dot`) is bound by its tiles, then by its pipeline (stages,
warps), then by how it splits K and the precision its dots run at; a reduction (`tl.sum`, `tl.max`,
... over an axis, or a scan) by the block it reduces, its warps and how many rows a program owns; an
elementwise kernel by its block, its warps and its vector width. The search's coordinate moves go
through the axes in that order, so the first steps of a run move what matters for its family.
"""

from __future__ import annotations

import ast
import re
from typing import Literal

from kernelcraft.agent.tuner.source import ParamKind, _decorator_name

Family = Literal["gemm", "reduction", "elementwise"]

FAMILY_AXES: dict[Family, tuple[str, ...]] = {
    "gemm": ("tile M", "tile N", "tile K", "tile", "stages", "warps", "split-K", "precision", "group M"),
    "reduction": ("block", "warps", "rows per program", "programs per SM"),
    "elementwise": ("block", "warps", "vector width"),
}
"""Per family, its axes from the one that matters most; an axis not listed comes after them all."""

COUNT_AXES = ("split-K", "rows per program", "vector width", "group M")
"""Axes whose values are counts, not tile sizes: 1 is their plain value (no split, one row), so a
literal 1 there is tuned where elsewhere it is a flag."""

DOTS = frozenset(("dot", "dot_scaled"))
REDUCTIONS = frozenset("sum max min reduce argmax argmin xor_sum cumsum cumprod associative_scan".split())

_KIND_AXES: dict[ParamKind, str] = {
    "num_warps": "warps",
    "num_stages": "stages",
    "precision": "precision",
    "split": "precision",
    "persistent": "programs per SM",
}


def function_families(tree: ast.Module) -> dict[str, Family]:
    """Each `@triton.jit` function's family: 'gemm' when it calls `tl.dot` (itself or through a jit
    helper of the module); else 'reduction' when it calls a reduction or a scan (`tl.sum(x,
    axis=1)`, `tl.max`, `tl.cumsum`, a method `x.sum(0)`); else 'elementwise'."""
    calls: dict[str, set[str]] = {}
    for fn in tree.body:
        if isinstance(fn, ast.FunctionDef) and "jit" in {_decorator_name(d) for d in fn.decorator_list}:
            calls[fn.name] = {
                _decorator_name(n.func)
                for n in ast.walk(fn)
                if isinstance(n, ast.Call)
                # `tl.max(x, axis=0)` or `x.max(0)` reduces; a bare `max(A, B)` of constexprs does not
                and (isinstance(n.func, ast.Attribute) or _decorator_name(n.func) not in REDUCTIONS)
            }
    reach = {name: set(called) for name, called in calls.items()}
    for _ in calls:  # a helper's helper: as deep as there are functions
        for name in reach:
            reach[name] |= {c for h in list(reach[name]) if h in calls for c in reach[h]}
    return {
        name: "gemm" if called & DOTS else "reduction" if called & REDUCTIONS else "elementwise"
        for name, called in reach.items()
    }


def kernel_family(tree: ast.Module) -> Family:
    """The module's family: a GEMM when one of its kernels is, else a reduction when one is, else
    elementwise."""
    families = set(function_families(tree).values())
    return "gemm" if "gemm" in families else "reduction" if "reduction" in families else "elementwise"


def name_axis(name: str) -> str | None:
    """The count axis a meta-parameter's name says (SPLIT_K, GROUP_M, ROWS_PER_PROGRAM, VEC), else
    None: a tile, which only the family names."""
    upper = name.upper()
    if "SPLIT" in upper:
        return "split-K"
    if re.fullmatch(r"GROUP(_SIZE)?_[MN]", upper):
        return "group M"
    if "ROWS" in upper and not upper.startswith(("N_", "NUM_")):  # N_ROWS is a shape
        return "rows per program"
    if "VEC" in upper:
        return "vector width"
    return None


def _tile_letter(name: str) -> str | None:
    """M, N or K of BLOCK_M, BLOCK_SIZE_K, TILE_N, BM: the name's last letter after a tile word."""
    m = re.fullmatch(r"(?:BLOCK|TILE|B)(?:_SIZE)?_?([MNK])", name.upper())
    return m.group(1) if m else None


def axis_of(kind: ParamKind, name: str, family: Family) -> str:
    """The axis a literal of `kind` setting `name` moves along in a kernel of `family`: 'warps',
    'stages', 'precision', 'programs per SM' by kind; a meta-parameter by its name (a count) or as
    a tile: 'tile M/N/K' in a GEMM, 'rows per program' (BLOCK_M: rows) or 'block' in a reduction,
    'block' in an elementwise kernel."""
    if kind != "meta":
        return _KIND_AXES[kind]
    counted = name_axis(name)
    if counted is not None:
        return counted
    letter = _tile_letter(name)
    if family == "gemm":
        return f"tile {letter}" if letter else "tile"
    if family == "reduction" and letter == "M":
        return "rows per program"
    return "block"


def axis_rank(axis: str, family: Family) -> int:
    """The axis's place in the family's order (0 first); axes the family does not list come last."""
    order = FAMILY_AXES[family]
    return order.index(axis) if axis in order else len(order)
