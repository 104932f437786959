"""The divisibility a candidate's kernels rely on, read from its source for the CPU shrink.

In the interpreter a large task runs at shrunk sizes (`source/shrink.py`). A GPU kernel written
for the task's sizes drops its masks where its block divides them (8192 columns in blocks of
1024): shrunk to 256 columns, the same kernel reads out of bounds and the verdict blames the
kernel for our sizes. So the parent reads the candidate's source (`ast` only: nothing of it runs)
for the sizes its kernels divide the task's by, and the shrink keeps each size a multiple of
them where the task's own size was (`multiples.Multiples`).

What counts (`read_divisors`):
- the tile sizes of a kernel that loads or stores a block without a mask (`tl.load`/`tl.store`/
  an atomic without `mask=` or `boundary_check=` on offsets from `tl.arange` or a block
  pointer, in it or a `@triton.jit` function it calls): the power-of-two values its launches
  give its tile parameters (`tl.constexpr`s read in `tl.arange`, a shape, a block pointer's
  `block_shape`, a loop's step, or passed to another jit function: not a `GROUP_M`; by keyword or position;
  a literal, or a name assigned a literal in the launching function, the module or
  `self.NAME` in a method), its tile parameters' defaults, the values of its
  `@triton.autotune` configs (`triton.Config({...})`, a comprehension over a literal list) and
  of its `@triton.heuristics` lambdas that return a literal, and `tl.arange(0, N)` with a
  literal or module-level `N`; the divisors in its launch's grid (`n // 128`, `triton.cdiv(n,
  128)`). A kernel that masks every access reads any size safely: its tiles do not count.
  A launch whose kernel is not found by name (`self.fn[grid]`) counts when any kernel does not mask.
- in any kernel or host code, a divisibility the candidate asserts: `X % c` in an `assert`, a
  `tl.static_assert`/`tl.device_assert`, or the test of an `if` whose body raises (any `c`,
  power of two or not): at a size `c` no longer divides, that check fails.

Limits: values passed through helper functions' parameters, containers or computed at run time
(`triton.next_power_of_2(n)`: it follows the size) are not followed; a kernel is judged masked or
not as a whole (one unmasked access counts its every launch). Pure; used by the job's host side
(`job/state.py`), whose reference worker gets the numbers (`Load.cpu_divisors`).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field

MAX_SOURCE_CHARS = 400_000
MAX_VALUES = 24
"""More distinct divisors than this are not a kernel's tiles but a source written to slow the
shrink (its checks are quadratic in the sizes and linear in these): the largest are kept."""
LARGEST = 1 << 16
"""Divisors over this are not block sizes (a literal size): left out."""
LAUNCH_OPTIONS = frozenset(
    {"num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion", "grid", "warmup", "stream"}
)
"""Launch keywords that are Triton's options, not the kernel's parameters."""
_ACCESS = frozenset({"load", "store"})
_MASKS = frozenset({"mask", "boundary_check"})


@dataclass
class Divisors:
    """What `read_divisors` found: the divisors and, for the verdict's note, where each was read."""

    values: set[int] = field(default_factory=set)
    where: dict[int, str] = field(default_factory=dict)
    """The first place each value was read (`BLOCK=1024 at line 31`)."""

    def add(self, value: int | None, why: str) -> None:
        if value is not None and 2 <= value <= LARGEST:
            self.values.add(value)
            self.where.setdefault(value, why)

    def canonical(self) -> list[int]:
        """The values, sorted, at most `MAX_VALUES` (the largest): what the shrink keeps
        (`multiples.Multiples`) and what names the task's reference (`JobState.key`)."""
        return sorted(sorted(self.values)[-MAX_VALUES:])

    def describe(self, limit: int = 4) -> str:
        """Where the values were read, largest first."""
        return "; ".join(self.where[v] for v in sorted(self.where, reverse=True)[:limit])


def note(
    found: Divisors, multiples: str | None, dropped: str, untiled: list[str] | None = None, flat: bool = False
) -> str | None:
    """The verdict's note on what the shrink did with the candidate's divisors (`Sized.multiples`);
    `untiled`, `flat`: the sizes no block tiles on its own (`gridmap.untiled`)."""
    if not found.values or multiples is None:
        return None
    values = ", ".join(map(str, found.canonical()))
    if multiples == "kept" and flat:
        return (
            f"the shrunk sizes keep each input's element count a multiple of the candidate's block "
            f"sizes and divisors that divided it at the task's own ({values}: {found.describe()}): "
            "it reads its inputs as flat buffers, so a kernel without masks tiles the trials' "
            "sizes as it tiles the task's"
        )[:800]
    if multiples == "kept":
        whole = ", ".join(untiled or [])
        return (
            f"the shrunk sizes keep each size a multiple of the candidate's block sizes and divisors "
            f"that divided it at the task's own ({values}: {found.describe()}), so that a kernel "
            "without masks tiles the trials' sizes as it tiles the task's"
            + (f"; {whole}, launched one program per index, shrunk as for any kernel" if whole else "")
        )[:800]
    return (
        f"warning: the candidate's kernels rely on the task's sizes being multiples of {values} "
        f"({found.describe()}), and {dropped}, over the interpreter's budget: the trials ran at the "
        "usual shrunk sizes, where a kernel without masks may read out of bounds (a crash there may "
        "be the sizes', not the kernel's); give sizes they divide with --cpu-sizes NAME=N, a "
        "sidecar TASK.cpu.json or KERNELCRAFT_CPU_SIZES in the task, or run --full-size or on a GPU"
    )[:900]


def _is_pow2(v: int) -> bool:
    return v >= 2 and v & (v - 1) == 0


def _name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _is_jit(fn: ast.FunctionDef) -> bool:
    return any("jit" in ast.unparse(d) for d in fn.decorator_list)


def _int(node: ast.AST | None) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.LShift, ast.Pow)):
        a, b = _int(node.left), _int(node.right)
        if a is not None and b is not None and 0 <= b <= 64:
            return (
                a * b
                if isinstance(node.op, ast.Mult)
                else a << b
                if isinstance(node.op, ast.LShift)
                else a**b
            )
    if isinstance(node, ast.Call) and _name(node.func) == "constexpr" and len(node.args) == 1:
        return _int(node.args[0])  # `BLOCK = tl.constexpr(1024)`
    return None


class _Scope:
    """Names bound to integer literals: module-level, a function's own, `self.NAME` in a class.
    A name assigned several literals holds each of them."""

    def __init__(self, tree: ast.Module) -> None:
        self.module = self._assigned(tree.body)
        self._locals: dict[int, dict[str, set[int]]] = {}
        self.selfs: dict[str, set[int]] = {}
        for node in ast.walk(tree):
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    if (
                        isinstance(t, ast.Attribute)
                        and isinstance(t.value, ast.Name)
                        and t.value.id == "self"
                    ):
                        self.selfs.setdefault(t.attr, set()).update(self._values(node.value, {}))

    def _assigned(self, body: list[ast.stmt] | ast.AST) -> dict[str, set[int]]:
        out: dict[str, set[int]] = {}
        nodes = ast.walk(body) if isinstance(body, ast.AST) else body
        for node in nodes:
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    if isinstance(t, ast.Name):
                        out.setdefault(t.id, set()).update(self._values(node.value, out))
        return out

    def _values(self, node: ast.AST, names: dict[str, set[int]]) -> set[int]:
        v = _int(node)
        if v is not None:
            return {v}
        if isinstance(node, ast.IfExp):  # `1024 if n > 4096 else 256`
            return self._values(node.body, names) | self._values(node.orelse, names)
        if isinstance(node, ast.Name):
            return set(names.get(node.id, ()))
        return set()

    def local(self, fn: ast.AST | None) -> dict[str, set[int]]:
        """The names `fn` binds to integers (computed once a function)."""
        if fn is None:
            return {}
        if id(fn) not in self._locals:
            self._locals[id(fn)] = self._assigned(fn)
        return self._locals[id(fn)]

    def values(self, node: ast.AST, local: dict[str, set[int]]) -> set[int]:
        """The integers `node` may hold: a literal, a local, module or `self.` name bound to them."""
        v = _int(node)
        if v is not None:
            return {v}
        if isinstance(node, ast.IfExp):
            return self.values(node.body, local) | self.values(node.orelse, local)
        if isinstance(node, ast.Name):  # a local shadows the module's, even one not a literal
            return set(local[node.id] if node.id in local else self.module.get(node.id, ()))
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
            return set(self.selfs.get(node.attr, ()))
        return set()


_TILE_CALLS = frozenset({"arange", "make_block_ptr", "advance", "broadcast_to", "full", "zeros"})


def _tiles(fn: ast.FunctionDef, helper: bool) -> set[str]:
    """The names in a kernel that may hold a block of offsets or a block pointer: assigned from
    `tl.arange`, `tl.make_block_ptr`/`tl.advance` or another such name (a helper's parameters
    too: its caller may pass a block)."""
    names = {a.arg for a in fn.args.args} if helper else set()
    for _ in range(4):  # assignments in any order: a few passes reach a fixed point
        for node in ast.walk(fn):
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and node.value is not None:
                if _holds_tile(node.value, names):
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return names


def _holds_tile(expr: ast.AST, names: set[str]) -> bool:
    return any(
        (isinstance(n, ast.Name) and n.id in names)
        or (isinstance(n, ast.Call) and _name(n.func) in _TILE_CALLS)
        for n in ast.walk(expr)
    )


def _unmasked(fn: ast.FunctionDef, helper: bool) -> bool:
    """Whether the kernel's own body loads, stores or updates a block of memory without a mask
    (a scalar access at a program's index, `tl.store(part_ptr + pid, s)`, reads no block)."""
    tiles = _tiles(fn, helper)
    for node in ast.walk(fn):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        base = ast.unparse(node.func.value)
        if base not in ("tl", "triton.language", "language"):
            continue
        attr = node.func.attr
        if attr not in _ACCESS and not attr.startswith("atomic_"):
            continue
        if any(k.arg in _MASKS for k in node.keywords):
            continue
        positional_mask = {"load": 2, "store": 3}.get(attr, 4 if attr == "atomic_cas" else 3)
        if len(node.args) >= positional_mask:
            continue
        pointer = (
            node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "pointer"), None)
        )
        if pointer is None or _holds_tile(pointer, tiles):
            return True
    return False


def _constexprs(fn: ast.FunctionDef) -> list[tuple[str, bool, ast.expr | None]]:
    """Each parameter: (name, whether it is a `tl.constexpr`, its default)."""
    args = fn.args.posonlyargs + fn.args.args
    defaults: list[ast.expr | None] = [None] * (len(args) - len(fn.args.defaults)) + list(fn.args.defaults)
    out = [
        (a.arg, a.annotation is not None and ast.unparse(a.annotation).endswith("constexpr"), d)
        for a, d in zip(args, defaults, strict=True)
    ]
    kw = zip(fn.args.kwonlyargs, fn.args.kw_defaults, strict=True)
    out += [
        (a.arg, a.annotation is not None and ast.unparse(a.annotation).endswith("constexpr"), d)
        for a, d in kw
    ]
    return out


_SHAPED = frozenset(
    {"zeros", "full", "reshape", "view", "broadcast_to", "make_block_ptr", "make_tensor_descriptor"}
)


def _tile_params(fn: ast.FunctionDef, kernels: dict[str, ast.FunctionDef]) -> set[str]:
    """The kernel's constexpr parameters that are tile widths: read in `tl.arange(...)`, a
    shape (`tl.zeros((BLOCK_M, BLOCK_N), ...)`, a block pointer's `block_shape`), a loop's
    step (`range(0, K, BLOCK_K)`), or passed on to another jit function; not a swizzle's
    `GROUP_M` or a flag."""
    names = {name for name, constexpr, _d in _constexprs(fn) if constexpr}
    used: set[str] = set()
    for node in ast.walk(fn):
        if not isinstance(node, ast.Call):
            continue
        call = _name(node.func)
        if call == "arange" or call in kernels:
            read: list[ast.AST] = [*node.args, *(k.value for k in node.keywords)]
        elif call in _SHAPED:
            read = [*node.args[:2], *(k.value for k in node.keywords if k.arg in ("shape", "block_shape"))]
        elif call == "range" and len(node.args) == 3:
            read = [node.args[2]]
        else:
            continue
        used |= {n.id for r in read for n in ast.walk(r) if isinstance(n, ast.Name) and n.id in names}
    return used


def _modulus(test: ast.AST) -> list[ast.expr]:
    """The right-hand sides of `X % c` in `test`."""
    return [n.right for n in ast.walk(test) if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod)]


def _config_values(node: ast.AST, scope: _Scope, keys: set[str]) -> set[int]:
    """The integer values of `keys` in the `triton.Config({...})` dicts under `node` (literals,
    or a name a comprehension draws from a literal list)."""
    drawn: dict[str, set[int]] = {}
    for comp in ast.walk(node):
        if isinstance(comp, (ast.ListComp, ast.GeneratorExp, ast.SetComp)):
            for gen in comp.generators:
                if isinstance(gen.target, ast.Name) and isinstance(gen.iter, (ast.List, ast.Tuple, ast.Set)):
                    drawn.setdefault(gen.target.id, set()).update(
                        v for e in gen.iter.elts if (v := _int(e)) is not None
                    )
    out: set[int] = set()
    for call in ast.walk(node):
        if isinstance(call, ast.Call) and _name(call.func) == "Config" and call.args:
            if isinstance(call.args[0], ast.Dict):
                for key, value in zip(call.args[0].keys, call.args[0].values, strict=True):
                    if isinstance(key, ast.Constant) and key.value in keys:
                        out |= scope.values(value, drawn)
    return out


def read_divisors(source: str) -> Divisors:
    """The divisors the candidate's kernels rely on (see the module docstring). Empty when the
    source does not parse, nests too deep to read, or is over `MAX_SOURCE_CHARS`."""
    if len(source) > MAX_SOURCE_CHARS:
        return Divisors()
    try:
        return _read(ast.parse(source))
    except (SyntaxError, ValueError, RecursionError):
        return Divisors()


def _read(tree: ast.Module) -> Divisors:
    found = Divisors()
    scope = _Scope(tree)
    kernels = {fn.name: fn for fn in ast.walk(tree) if isinstance(fn, ast.FunctionDef) and _is_jit(fn)}
    unmasked = _reach_unmasked(kernels)
    any_unmasked = bool(unmasked)
    tiles = {name: _tile_params(fn, kernels) for name, fn in kernels.items()}
    for name, fn in kernels.items():
        if name in unmasked:
            _kernel_tiles(fn, tree, scope, tiles[name], found)
        for node in ast.walk(fn):  # tl.static_assert(N % BLOCK == 0): a check that fails
            if (
                isinstance(node, ast.Call)
                and _name(node.func) in ("static_assert", "device_assert")
                and node.args
            ):
                for rhs in _modulus(node.args[0]):
                    for v in scope.values(rhs, {}):
                        found.add(v, f"{ast.unparse(node)[:60]} at line {node.lineno}")
    grids: dict[int, dict[str, ast.expr]] = {}
    for node, owner in _with_function(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript):
            kernel = kernels.get(_name(node.func.value) or "")
            if kernel.name in unmasked if kernel is not None else any_unmasked:
                where = owner or tree
                if id(where) not in grids:
                    grids[id(where)] = _grids(where)
                kernel_tiles = tiles[kernel.name] if kernel is not None else None
                _launch(node, kernel, scope, scope.local(owner), grids[id(where)], kernel_tiles, found)
        elif isinstance(node, ast.Assert) or (
            isinstance(node, ast.If) and any(isinstance(s, ast.Raise) for s in node.body)
        ):
            local = scope.local(owner)
            for rhs in _modulus(node.test):
                for v in scope.values(rhs, local):
                    found.add(v, f"`{ast.unparse(node.test)[:60]}` at line {node.lineno}")
    return found


def _with_function(tree: ast.Module) -> Iterator[tuple[ast.AST, ast.AST | None]]:
    """Each node with the outermost function it is in (a method's, forward's), or None."""
    todo: list[tuple[ast.AST, ast.AST | None]] = [(s, None) for s in tree.body]
    while todo:
        node, fn = todo.pop()
        if fn is None and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            fn = node
        yield node, fn
        todo.extend((c, fn) for c in ast.iter_child_nodes(node))


def _reach_unmasked(kernels: dict[str, ast.FunctionDef]) -> set[str]:
    """The kernels that access memory without a mask, themselves or through a jit function they call."""
    calls = {
        name: {_name(c.func) for c in ast.walk(fn) if isinstance(c, ast.Call)} & kernels.keys()
        for name, fn in kernels.items()
    }
    helpers = set().union(*calls.values()) if calls else set()
    out = {name for name, fn in kernels.items() if _unmasked(fn, name in helpers)}
    changed = True
    while changed:
        changed = False
        for name, called in calls.items():
            if name not in out and called & out:
                out.add(name)
                changed = True
    return out


def _kernel_tiles(
    fn: ast.FunctionDef, tree: ast.Module, scope: _Scope, tiles: set[str], found: Divisors
) -> None:
    """A kernel's own tile sizes: its tile parameters' (`tiles`) defaults, the literals its
    autotune configs and heuristics give them, and literal `tl.arange` widths."""
    for name, _constexpr, default in _constexprs(fn):
        if name in tiles and default is not None:
            for v in filter(_is_pow2, scope.values(default, {})):
                found.add(v, f"{fn.name}'s {name}={v} at line {fn.lineno}")
    for d in fn.decorator_list:
        text = ast.unparse(d.func if isinstance(d, ast.Call) else d)
        if text.endswith("autotune") and isinstance(d, ast.Call):
            configs = [k.value for k in d.keywords if k.arg == "configs"] + d.args[:1]
            for c in configs:
                # `configs=CONFIGS` or a function that builds them: every Config in the module
                where = tree if isinstance(c, (ast.Name, ast.Call)) else c
                for v in filter(_is_pow2, _config_values(where, scope, tiles)):
                    found.add(v, f"{fn.name}'s autotune config {v} at line {d.lineno}")
        elif text.endswith("heuristics") and isinstance(d, ast.Call) and d.args:
            table = d.args[0]
            if isinstance(table, ast.Dict):
                for key, lam in zip(table.keys, table.values, strict=True):
                    if isinstance(key, ast.Constant) and key.value in tiles and isinstance(lam, ast.Lambda):
                        for v in filter(_is_pow2, scope.values(lam.body, {})):
                            found.add(v, f"{fn.name}'s heuristics {key.value}={v} at line {d.lineno}")
    for node in ast.walk(fn):
        if isinstance(node, ast.Call) and _name(node.func) == "arange" and len(node.args) == 2:
            for v in filter(_is_pow2, scope.values(node.args[1], {})):
                found.add(v, f"`{ast.unparse(node)[:40]}` in {fn.name} at line {node.lineno}")


def _grids(fn: ast.AST) -> dict[str, ast.expr]:
    """What `fn` assigns its names that are not integers (a grid built before its launch)."""
    out: dict[str, ast.expr] = {}
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            out[node.targets[0].id] = node.value
    return out


def _launch(
    call: ast.Call,
    kernel: ast.FunctionDef | None,
    scope: _Scope,
    local: dict[str, set[int]],
    grids: dict[str, ast.expr],
    tiles: set[str] | None,
    found: Divisors,
) -> None:
    """A launch `kernel[grid](...)`: the power-of-two values its tile parameters (`tiles`; any
    int keyword but Triton's options when the kernel is not found by name, None) take, and
    the grid's divisors."""
    assert isinstance(call.func, ast.Subscript)
    name = _name(call.func.value) or "a kernel"
    params = _constexprs(kernel) if kernel is not None else []
    given: list[tuple[str, ast.expr]] = [(k.arg, k.value) for k in call.keywords if k.arg is not None]
    given += [(p, a) for (p, _c, _d), a in zip(params, call.args, strict=False)]
    for arg, value in given:
        if arg in LAUNCH_OPTIONS or (tiles is not None and arg not in tiles):
            continue
        for v in filter(_is_pow2, scope.values(value, local)):
            found.add(v, f"{arg}={v} in {name}'s launch at line {call.lineno}")
    grid: ast.AST = call.func.slice
    if isinstance(grid, ast.Name):  # `grid = (n // BLOCK,)` or `grid = lambda meta: ...` before
        grid = grids.get(grid.id, grid)
    for node in ast.walk(grid):
        rhs = None
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.FloorDiv):
            rhs = node.right
        elif isinstance(node, ast.Call) and _name(node.func) == "cdiv" and len(node.args) == 2:
            rhs = node.args[1]
        if rhs is not None:
            for v in scope.values(rhs, local):
                found.add(v, f"`{ast.unparse(node)[:40]}` in {name}'s grid at line {call.lineno}")
