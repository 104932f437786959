"""Which of a task's sizes the candidate launches one program per index of (for the CPU shrink).

The shrink keeps a size a multiple of the candidate's block sizes where the task's was
(`source/divisors.py`, `multiples.Multiples`), not knowing which size a block tiles: a row-wise
kernel with `BLOCK=1024` over 4096 x 8192 would keep both at multiples of 1024, a thousand
programs in the interpreter where a hundred tell as much. A size whose every place in the
inputs is a dimension the candidate's grid takes whole, one program per index (`grid =
(rows,)` with `rows = x.shape[0]`), is tiled by no block: it shrinks as for any candidate.

Read with `ast` only (nothing runs), and only where it is plain: the task's `get_inputs()`
returns a list or tuple of `torch.randn(a, b, ...)`-style calls (or names bound to them) whose
size arguments are its module-level size constants; the candidate's `ModelNew.forward` takes the
inputs in that order, launches every kernel itself or in a function or method it passes its
inputs to by name (a launch anywhere else: nothing is said) and reads the dimension straight
from its input (`x.shape[0]`, `x.size(0)`, `rows, n = x.shape`; or the rows of a view of
it as rows of its last dimension: `x.view(-1, x.shape[-1]).shape[0]`, `x.numel() // n`;
an input reassigned other than by `.contiguous()`-like calls is not read). A dimension that also
appears in a grid any other way (`triton.cdiv(rows, BLOCK_M)`), a size read by
`get_init_inputs()` (a model's) or used in `get_inputs()` otherwise than as a whole dimension,
is not per program. Pure; used by the job's host side (`job/state.py`).
"""

from __future__ import annotations

import ast

from kernelcraft.engine.source import shrink

MAX_SOURCE_CHARS = 400_000
_MAKERS = frozenset({"randn", "rand", "zeros", "ones", "empty", "randint", "full", "rand_like"})
_SAME_SHAPE = frozenset({"contiguous", "float", "half", "bfloat16", "to", "clone", "detach", "cuda", "cpu"})

Dim = tuple[int, int]
"""(input index, dimension)."""


def per_program(task_source: str, candidate_source: str) -> list[str]:
    """The task's size constants the candidate launches one program per index of (see the
    module docstring), sorted; empty when either source is not plain enough to tell."""
    if len(task_source) > MAX_SOURCE_CHARS or len(candidate_source) > MAX_SOURCE_CHARS:
        return []
    try:
        task, candidate = ast.parse(task_source), ast.parse(candidate_source)
        places, ranks = _input_places(task)
        whole = _whole_dims(candidate, ranks)
    except (SyntaxError, ValueError, RecursionError):
        return []
    if not places or not whole:
        return []
    model = {name for name, _node, _v in shrink.size_constants(task, ("get_init_inputs",))}
    return sorted(
        name
        for name, dims in places.items()
        if name not in model and dims and None not in dims and all(d in whole for d in dims)
    )


def _function(tree: ast.AST, name: str) -> ast.FunctionDef | None:
    return next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name), None)


def _call_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Call):
        f = node.func
        return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
    return None


def _maker(node: ast.AST) -> ast.Call | None:
    """`torch.randn(...)`, through `.to(...)`/`.contiguous()`-like calls on it."""
    while (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _SAME_SHAPE
    ):
        node = node.func.value
    return node if isinstance(node, ast.Call) and _call_name(node) in _MAKERS else None


def _size_args(call: ast.Call) -> list[ast.expr] | None:
    """The size arguments of a maker call, in dimension order; None when not plain."""
    name = _call_name(call)
    args: list[ast.expr] = list(call.args)
    if name == "randint":  # randint(low, high, size) or randint(high, size)
        size = next((k.value for k in call.keywords if k.arg == "size"), args[-1] if args else None)
        args = [size] if size is not None else []
    elif name == "full":
        args = args[:1]
    if len(args) == 1 and isinstance(args[0], (ast.Tuple, ast.List)):
        return list(args[0].elts)
    if name in ("randint", "full"):
        return None
    return args


def _input_places(task: ast.Module) -> tuple[dict[str, list[Dim | None]], dict[int, int]]:
    """Each name `get_inputs()` reads: the input dimensions it is, None for any other use; and
    each input's rank, where its maker is plain."""
    fn = _function(task, "get_inputs")
    if fn is None:
        return {}, {}
    returns = [n for n in ast.walk(fn) if isinstance(n, ast.Return)]
    if len(returns) != 1 or not isinstance(returns[0].value, (ast.List, ast.Tuple)):
        return {}, {}
    bound = {
        n.targets[0].id: n.value
        for n in ast.walk(fn)
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
    }
    slots: dict[int, Dim] = {}
    ranks: dict[int, int] = {}
    for i, element in enumerate(returns[0].value.elts):
        value = bound.get(element.id, element) if isinstance(element, ast.Name) else element
        call = _maker(value)
        args = _size_args(call) if call is not None else None
        if args is not None and not any(isinstance(a, ast.Starred) for a in args):
            ranks[i] = len(args)
        for j, arg in enumerate(args or []):
            if isinstance(arg, ast.Name):
                slots[id(arg)] = (i, j)
    places: dict[str, list[Dim | None]] = {}
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            places.setdefault(node.id, []).append(slots.get(id(node)))
    return places, ranks


Extent = frozenset[Dim]
"""Input dimensions whose product a value is: one (`x.shape[0]`), or the rows of a view of an
input as rows of its last dimension (`x.view(-1, x.shape[-1]).shape[0]`, `x.numel() // N`)."""


class _Reads:
    """What a function's names and expressions read of its inputs' dimensions (`extent`)."""

    def __init__(self, params: dict[str, int], ranks: dict[int, int]) -> None:
        self.params, self.ranks = params, ranks
        self.views: dict[str, int] = {}
        """Names bound to an input viewed as rows of its last dimension."""
        self.origin: dict[str, Extent] = {}

    def _index(self, i: int, k: ast.AST, rank: int | None) -> int | None:
        if not isinstance(k, ast.Constant) or type(k.value) is not int:
            if (
                isinstance(k, ast.UnaryOp)
                and isinstance(k.op, ast.USub)
                and isinstance(k.operand, ast.Constant)
            ):
                value = -k.operand.value if type(k.operand.value) is int else None
                return rank + value if value is not None and rank is not None and -rank <= value else None
            return None
        return (
            k.value if k.value >= 0 else (rank + k.value if rank is not None and -rank <= k.value else None)
        )

    def _of(self, x: ast.AST, k: ast.AST) -> Extent | None:
        """Dimension `k` of `x`, an input or a view of one."""
        if not isinstance(x, ast.Name):
            return None
        if x.id in self.params:
            i = self.params[x.id]
            j = self._index(i, k, self.ranks.get(i))
            return frozenset({(i, j)}) if j is not None else None
        if x.id in self.views:
            i = self.views[x.id]
            rank = self.ranks.get(i)
            j = self._index(i, k, 2)
            if rank is None or j is None:
                return None
            return frozenset((i, d) for d in range(rank - 1)) if j == 0 else frozenset({(i, rank - 1)})
        return None

    def extent(self, node: ast.AST) -> Extent | None:
        """The input dimensions `node` reads whole (see `Extent`), or None."""
        if isinstance(node, ast.Name):
            return self.origin.get(node.id)
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Attribute)
            and node.value.attr == "shape"
        ):
            return self._of(node.value.value, node.slice)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and len(node.args) == 1:
            if node.func.attr == "size":
                return self._of(node.func.value, node.args[0])
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.FloorDiv):  # x.numel() // N
            x, last = node.left, self.extent(node.right)
            if (
                isinstance(x, ast.Call)
                and isinstance(x.func, ast.Attribute)
                and x.func.attr == "numel"
                and isinstance(x.func.value, ast.Name)
                and x.func.value.id in self.params
                and last is not None
            ):
                i = self.params[x.func.value.id]
                rank = self.ranks.get(i)
                if rank is not None and last == frozenset({(i, rank - 1)}):
                    return frozenset((i, d) for d in range(rank - 1))
        return None

    def row_view(self, value: ast.AST, inputs: dict[str, int]) -> int | None:
        """The input `value` views as rows of its last dimension (`x.view(-1, x.shape[-1])`,
        `.reshape`, through `.contiguous()`-like calls), or None."""
        node = value
        while (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _SAME_SHAPE
        ):
            node = node.func.value
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("view", "reshape")
            and len(node.args) == 2
            and not node.keywords
            and ast.unparse(node.args[0]) == "-1"
        ):
            return None
        x = node.func.value
        while isinstance(x, ast.Call) and isinstance(x.func, ast.Attribute) and x.func.attr in _SAME_SHAPE:
            x = x.func.value
        if not isinstance(x, ast.Name) or x.id not in inputs:
            return None
        i = inputs[x.id]
        rank = self.ranks.get(i)
        saved, self.params = self.params, {**self.params, x.id: i}
        try:
            last = self.extent(node.args[1])
        finally:
            self.params = saved
        return i if rank is not None and rank >= 2 and last == frozenset({(i, rank - 1)}) else None


Scope = tuple[ast.FunctionDef, dict[str, int], dict[str, int]]
"""A function, its parameters that hold an input unchanged and those given one at all
({name: input index})."""


def _scopes(candidate: ast.Module) -> list[Scope]:
    """`ModelNew.forward` and the functions and methods it passes its inputs to by name (one
    level down) (`Scope`); empty when some kernel is launched elsewhere, or none is."""
    cls = next((n for n in candidate.body if isinstance(n, ast.ClassDef) and n.name == "ModelNew"), None)
    forward = _function(cls, "forward") if cls is not None else None
    if cls is None or forward is None or forward.args.vararg is not None:
        return []
    inputs = {a.arg: i for i, a in enumerate(forward.args.args[1:])}
    params = _unchanged(forward, inputs)
    scopes: list[Scope] = [(forward, params, inputs)]
    helpers = {n.name: n for n in candidate.body if isinstance(n, ast.FunctionDef)}
    methods = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}
    for call in ast.walk(forward):  # `return l2norm(x)`, `self._launch(x, out)`: one level down
        if not isinstance(call, ast.Call):
            continue
        f = call.func
        if isinstance(f, ast.Name) and f.id in helpers:
            callee, skip = helpers[f.id], 0
        elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "self":
            if f.attr not in methods or f.attr == "forward":
                continue
            callee, skip = methods[f.attr], 1
        else:
            continue
        names = [a.arg for a in callee.args.args[skip:]]
        given = {
            names[k]: params[arg.id]
            for k, arg in enumerate(call.args[: len(names)])
            if isinstance(arg, ast.Name) and arg.id in params
        }
        scopes.append((callee, _unchanged(callee, given), given))
    launches = [
        n for n in ast.walk(candidate) if isinstance(n, ast.Call) and isinstance(n.func, ast.Subscript)
    ]
    inside = {id(n) for fn, _p, _i in scopes for n in ast.walk(fn)}
    if not launches or any(id(c) not in inside for c in launches):
        return []  # a kernel launched elsewhere: its grid is not read here
    return scopes


def _whole_dims(candidate: ast.Module, ranks: dict[int, int]) -> set[Dim]:
    """The input dimensions the grids of `_scopes` take whole and nowhere otherwise."""
    whole: set[Dim] = set()
    other: set[Dim] = set()
    for fn, given, inputs in _scopes(candidate):
        w, o = _grid_dims(fn, given, inputs, ranks)
        whole |= w
        other |= o
    return whole - other


_SHAPE_READS = frozenset(
    {
        "shape",
        "size",
        "stride",
        "ndim",
        "dim",
        "view",
        "reshape",
        "transpose",
        "permute",
        "t",
        "T",
        "mT",
        "unsqueeze",
        "squeeze",
        "expand",
        "narrow",
        "split",
        "chunk",
        "unfold",
        "select",
        "flatten",
        "movedim",
        "unbind",
        "as_strided",
        "view_as",
        "reshape_as",
        "expand_as",
        "repeat",
        "tile",
    }
)


def flat(candidate_source: str) -> bool:
    """Whether the candidate reads its inputs only as flat buffers: every kernel is launched from
    `_scopes`, none of which reads a shape (`.shape`, `.size()`, `.stride()`, `len()`, an index
    `x[i]`) or makes a view other than the whole buffer (`.view(-1)`, `.reshape(-1)`,
    `.flatten()`); its kernels then see the element counts (`x.numel()`) alone."""
    if len(candidate_source) > MAX_SOURCE_CHARS:
        return False
    try:
        scopes = _scopes(ast.parse(candidate_source))
        return bool(scopes) and all(_reads_flat(fn) for fn, _params, _inputs in scopes)
    except (SyntaxError, ValueError, RecursionError):
        return False


def _reads_flat(fn: ast.FunctionDef) -> bool:
    """Whether `fn` reads no shape and views nothing but whole buffers (`flat`)."""
    calls = {id(c.func): c for c in ast.walk(fn) if isinstance(c, ast.Call)}
    for node in ast.walk(fn):
        if isinstance(node, ast.Subscript) and not isinstance(node.ctx, ast.Store) and id(node) not in calls:
            if not (isinstance(node.value, ast.Name) and node.value.id in ("meta", "META")):
                return False  # x[0], x.shape[1]; a grid lambda's meta["BLOCK"] is no shape
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "len":
            return False
        if isinstance(node, ast.Attribute) and node.attr in _SHAPE_READS:
            call = calls.get(id(node))
            args = [ast.unparse(a) for a in call.args] if call is not None else []
            whole = (
                call is not None
                and not call.keywords
                and (
                    (node.attr == "flatten" and not args)
                    or (node.attr in ("view", "reshape") and args == ["-1"])
                )
            )
            if not whole:
                return False
    return True


def untiled(task_source: str, candidate_source: str) -> tuple[list[str], bool]:
    """(the task's sizes no block of the candidate's tiles on its own, whether it reads its
    inputs as flat buffers): when `flat`, every size of the inputs' own (not a model's); else
    `per_program`'s."""
    if flat(candidate_source):
        try:
            task = ast.parse(task_source)
        except (SyntaxError, ValueError, RecursionError):
            return [], False
        model = {name for name, _n, _v in shrink.size_constants(task, ("get_init_inputs",))}
        inputs = {name for name, _n, _v in shrink.size_constants(task)} - model
        return sorted(inputs), True
    return per_program(task_source, candidate_source), False


def _unchanged(fn: ast.FunctionDef, params: dict[str, int]) -> dict[str, int]:
    """`params` less those `fn` reassigns (`x = x.view(...)` changes what x's dimensions are)."""
    params = dict(params)
    for node in ast.walk(fn):
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name) and n.id in params and _maker_free(node.value, n.id):
                        params.pop(n.id)
    return params


def _grid_dims(
    fn: ast.FunctionDef, params: dict[str, int], inputs: dict[str, int], ranks: dict[int, int]
) -> tuple[set[Dim], set[Dim]]:
    """(the input dimensions `fn`'s launches take whole as a grid entry, those its grids read
    any other way). `params`: its names holding an input unchanged; `inputs`: given one at all
    (a view of one is read from there)."""
    reads = _Reads(params, ranks)
    grids: dict[str, ast.expr] = {}
    assigned: dict[str, int] = {}
    first_read: dict[str, int] = {}
    for node in ast.walk(fn):
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.For, ast.NamedExpr)):
            for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        assigned[n.id] = assigned.get(n.id, 0) + 1
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            first_read[node.id] = min(first_read.get(node.id, node.lineno), node.lineno)
    assigns = [n for n in ast.walk(fn) if isinstance(n, ast.Assign) and len(n.targets) == 1]
    for node in assigns:  # views first: `x2 = x.view(-1, n)`, `x = x.reshape(-1, x.shape[-1])`
        target = node.targets[0]
        if isinstance(target, ast.Name) and assigned.get(target.id) == 1:
            i = reads.row_view(node.value, inputs)
            # an input's name reused for its view: only when nothing read it before
            if i is not None and (target.id not in inputs or first_read.get(target.id, 0) >= node.lineno):
                reads.views[target.id] = i
    for _ in range(2):  # names read from names (`n = x.shape[-1]`, then `x.numel() // n`)
        for node in assigns:
            target, value = node.targets[0], node.value
            if isinstance(target, ast.Name):
                grids[target.id] = value
                if assigned.get(target.id) == 1 and (e := reads.extent(value)) is not None:
                    reads.origin[target.id] = e
            elif isinstance(target, ast.Tuple) and isinstance(value, ast.Attribute) and value.attr == "shape":
                for j, elt in enumerate(target.elts):  # `B, N = x.shape`
                    k = ast.Constant(j)
                    e = reads._of(value.value, k) if isinstance(elt, ast.Name) else None
                    if e is not None and isinstance(elt, ast.Name) and assigned.get(elt.id) == 1:
                        reads.origin[elt.id] = e
    whole: set[Dim] = set()
    other: set[Dim] = set()
    for call in ast.walk(fn):
        if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Subscript):
            continue
        grid: ast.AST = call.func.slice
        if isinstance(grid, ast.Name):
            grid = grids.get(grid.id, grid)
        if isinstance(grid, ast.Lambda):
            grid = grid.body
        entries = grid.elts if isinstance(grid, ast.Tuple) else [grid]
        for entry in entries:
            e = reads.extent(entry)
            if e is not None:
                whole |= e
                continue
            for n in ast.walk(entry):
                if (e := reads.extent(n)) is not None:
                    other |= e
    return whole, other


def _maker_free(value: ast.AST | None, name: str) -> bool:
    """Whether an assignment to input `name` may change its shape (anything but `x.contiguous()`-like)."""
    node = value
    while (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _SAME_SHAPE
    ):
        node = node.func.value
    return not (isinstance(node, ast.Name) and node.id == name)
