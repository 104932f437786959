"""What the offline tuner may change in a kernel's source: its tunable launch parameters.

`find_params(source)` reads the module with `ast` and returns the integer literals that set a launch
configuration. It is built from small named decisions, each with its rationale in its docstring:
where the launches are (`launches`), which argument binds to which kernel parameter
(`launch_arguments`), which parameters configure a launch (`is_launch_parameter`), which values are
tuned (`is_tunable`), which names passed to a launch are constants (`constant_for`) and which are
set per branch or by unpacking (`branch_values`, over `scope_values`), which literals of an
expression set its value (`literals_in`: a cap, an arm of `a if c else b`), the least tile
a `tl.dot` kernel may be given (`dot_floor`), the constexpr defaults no launch overrides
(`unpassed_defaults`), and, for a kernel under `@triton.autotune`, which `triton.Config`s it is given
(`autotune_configs`) and what each sets (`config_arguments`), and, for a persistent launch, how many
programs an SM its grid asks for (`persistent_params`); where none of these is found, the num_warps a
launch does not set (`unset_warps`); each param then gets the axis it moves along
and that axis's rank for the kernel's family (`family.py`). `search.py` searches the values; this
module only finds them.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import replace

from kernelcraft.agent.tuner.axes import persistent_params, precision_params, split_params
from kernelcraft.agent.tuner.family import axis_of, axis_rank, function_families, kernel_family, name_axis
from kernelcraft.agent.tuner.source import (
    CONFIG_PARAMETERS,
    DEFAULT_WARPS,
    LAUNCH_OPTIONS,
    META_MIN,
    MIN_DOT_DIM,
    NUM_STAGES,
    NUM_WARPS,
    Assignments,
    JitFn,
    Launch,
    Param,
    ParamKind,
    _argument,
    _decorator_name,
    _int_const,
    _is_pow2,
    _Offsets,
    assignments,
    jit_functions,
    launch_arguments,
    launches,
)


def is_launch_parameter(name: str, fn: JitFn | None) -> bool:
    """num_warps/num_stages always; a constexpr of a kernel defined here; else an UPPERCASE name,
    the convention for a kernel imported from elsewhere."""
    if name in LAUNCH_OPTIONS:
        return True
    if fn is not None:
        return name in fn.constexpr
    return name.isupper()


def kind_of(name: str) -> ParamKind:
    """A launch option is its own kind; every other launch parameter is a meta-parameter."""
    return "num_warps" if name == "num_warps" else "num_stages" if name == "num_stages" else "meta"


def is_tunable(kind: ParamKind, value: int, name: str = "") -> bool:
    """Options within Triton's ranges; a meta-parameter only as a power of two of at least 2 (another
    value is a shape, not a tile, and 1 is a flag), or of at least 1 where its name says it counts
    (`SPLIT_K=1` is no split, `ROWS_PER_PROGRAM=1` one row: `family.name_axis`)."""
    if kind == "num_warps":
        return value in NUM_WARPS
    if kind == "num_stages":
        return value in NUM_STAGES
    if kind == "meta" and name_axis(name) is not None:
        return _is_pow2(value)
    return _is_pow2(value) and value >= META_MIN


def constant_for(name: ast.Name, launch: Launch, module: Assignments) -> tuple[ast.expr, str, str] | None:
    """For a name passed to a launch: (its value, its key, the launch it configures) when the first
    scope that assigns it (the function, then the module) assigns it exactly once, else None. A
    module constant is keyed by its name and configures every launch that passes it ("")."""
    for assigns, where in ((launch.local, launch.scope), (module, "")):
        if name.id in assigns:
            defs = assigns[name.id]
            if len(defs) != 1:  # a name assigned twice is not a constant
                return None
            if where:
                return defs[0].value, f"{where}.{name.id}", launch.kernel
            return defs[0].value, name.id, ""
    return None


def dot_floor(kind: ParamKind, value: int, fn: JitFn | None, name: str = "") -> int:
    """The least value proposed: in a kernel that calls tl.dot, a meta-parameter stays at 16 or
    more (tl.dot's least dimension) unless it is already smaller; a count (SPLIT_K, GROUP_M: no
    dimension of a dot) goes down to 1."""
    if kind == "meta" and name_axis(name) is not None:
        return 1
    return min(MIN_DOT_DIM, value) if kind == "meta" and fn is not None and fn.uses_dot else META_MIN


def literals_in(value: ast.expr) -> Iterator[ast.Constant]:
    """The literals of an expression passed to a launch parameter that set its value: the arguments
    of `min`/`max` (a cap or a floor: `min(128, triton.next_power_of_2(n))`), both arms of
    `a if cond else b`, and the numerator of `//` (a budget shared out over a tile: `8192 //
    BLOCK_I`). A literal anywhere else (a shape divided, `n // 4`; an argument of another call,
    `next_power_of_2(max(n, 16))`) is no configuration and is left alone."""
    if isinstance(value, ast.Constant):
        yield value
    elif isinstance(value, ast.IfExp):
        yield from literals_in(value.body)
        yield from literals_in(value.orelse)
    elif isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in ("min", "max"):
        for arg in value.args:
            yield from literals_in(arg)
    elif isinstance(value, ast.BinOp) and isinstance(value.op, ast.FloorDiv):
        yield from literals_in(value.left)


def scope_values(scope: ast.AST) -> dict[str, list[ast.expr]]:
    """Every value a scope assigns each name, in source order: `name = value`, and each element of
    `a, b = 1, 2` (unpacking a tuple or list written out); nested functions and classes left out."""
    body = getattr(scope, "body", [])
    found: dict[str, list[ast.expr]] = {}
    for stmt in body:
        if isinstance(stmt, ast.FunctionDef | ast.ClassDef):
            continue
        for node in ast.walk(stmt):
            if not isinstance(node, ast.Assign) or len(node.targets) != 1:
                continue
            target, value = node.targets[0], node.value
            if isinstance(target, ast.Name):
                found.setdefault(target.id, []).append(value)
            elif (
                isinstance(target, ast.Tuple | ast.List)
                and isinstance(value, ast.Tuple | ast.List)
                and len(target.elts) == len(value.elts)
                and not any(isinstance(e, ast.Starred) for e in [*target.elts, *value.elts])
            ):
                for t, v in zip(target.elts, value.elts, strict=True):
                    if isinstance(t, ast.Name):
                        found.setdefault(t.id, []).append(v)
    return found


def branch_values(name: ast.Name, launch: Launch, tree: ast.Module) -> list[tuple[ast.expr, str, str]]:
    """(value, key, the launch it configures) of each value the first scope that assigns a name
    passed to a launch (the function, then the module) gives it, where `constant_for` finds no one
    constant: a name set in several branches (`if inner == 1: block = 2048 else: block = 8192 //
    block_i`, each branch the configuration of one class of shapes) or by unpacking a tuple. Each
    value is keyed by its line."""
    for scope, where in ((launch.node, launch.scope), (tree, "")):
        if scope is None:
            continue
        values = scope_values(scope)
        if name.id in values:
            head = f"{where}.{name.id}" if where else name.id
            configures = launch.kernel if where else ""
            return [(v, f"{head}@{v.lineno}", configures) for v in values[name.id]]
    return []


def unpassed_defaults(
    jit: dict[str, JitFn], passed: dict[str, set[str]]
) -> Iterator[tuple[str, str, ast.expr]]:
    """(kernel, name, default) of each constexpr default that no launch passes: it configures every
    launch of its kernel. Autotuned kernels are skipped."""
    for kernel, fn in jit.items():
        if fn.autotuned:
            continue
        for name in sorted(fn.constexpr - passed.get(kernel, set())):
            if name in fn.defaults:
                yield kernel, name, fn.defaults[name]


def autotune_configs(fn: JitFn, module: Assignments) -> list[tuple[int, ast.Call]]:
    """(index, call) of each `triton.Config(...)` an autotuned kernel is given, in a list or tuple
    written in the decorator or assigned once to a module-level name. Configs built any other way (a
    comprehension, `+`, a function's result, a name assigned twice) are left alone: no literal there
    is one config's own value."""
    configs = fn.configs
    if isinstance(configs, ast.Name):
        defs = module.get(configs.id, [])
        configs = defs[0].value if len(defs) == 1 else None
    if not isinstance(configs, ast.List | ast.Tuple):
        return []
    return [
        (i, c)
        for i, c in enumerate(configs.elts)
        if isinstance(c, ast.Call) and _decorator_name(c.func) == "Config"
    ]


def config_arguments(config: ast.Call, fn: JitFn) -> list[tuple[str, ast.expr]]:
    """(name, value) pairs of one `triton.Config`: each entry of its dict literal whose key names a
    constexpr of the kernel (the autotuner passes them as the launch would), then num_warps and
    num_stages, by keyword or position. A dict that is not a literal gives no entries, and
    `**other` in one is skipped."""
    pairs: list[tuple[str, ast.expr]] = []
    meta = _argument(config, 0, "kwargs")
    if isinstance(meta, ast.Dict):
        pairs += [
            (key.value, value)
            for key, value in zip(meta.keys, meta.values, strict=True)
            if isinstance(key, ast.Constant) and isinstance(key.value, str) and key.value in fn.constexpr
        ]
    for position, name in enumerate(CONFIG_PARAMETERS[1:], start=1):
        if (value := _argument(config, position, name)) is not None:
            pairs.append((name, value))
    return pairs


class _Found:
    """The params found so far, one per literal (by its span), keyed in the order found."""

    def __init__(self, source: str, jit: dict[str, JitFn]) -> None:
        self.offsets = _Offsets(source)
        self.jit = jit
        self.params: dict[tuple[int, int], Param] = {}
        self.used_keys: dict[str, int] = {}

    def key_for(self, base: str) -> str:
        n = self.used_keys.get(base, 0) + 1
        self.used_keys[base] = n
        return base if n == 1 else f"{base}#{n}"

    def add(
        self,
        node: ast.expr,
        base: str,
        name: str,
        launch: str,
        kernel: str,
        config: int | None = None,
        alone: bool = False,
    ) -> None:
        """Add `node` if it is a tunable literal for parameter `name` of `kernel`'s launch (or of its
        `config`-th autotune config). A literal found again keeps its first key, launch and config."""
        value = _int_const(node)
        kind = kind_of(name)
        if value is None or not is_tunable(kind, value, name):
            return
        floor = dot_floor(kind, value, self.jit.get(kernel), name)
        span = self.offsets.span(node)
        if span not in self.params:
            key = self.key_for(base)
            self.params[span] = Param(
                key, kind, value, *span, node.lineno, launch, floor, config=config, name=name, alone=alone
            )
        elif floor > self.params[span].floor:  # a constant or config list shared with a dot kernel
            self.params[span] = replace(self.params[span], floor=floor)

    def add_value(
        self, value: ast.expr, base: str, name: str, launch: str, kernel: str, alone: bool = False
    ) -> None:
        """Add the literal `value`, or the literals that set an expression's value (`literals_in`),
        which are each limited alone: a cap is no dimension of the launch's tile."""
        if isinstance(value, ast.Constant):
            self.add(value, base, name, launch, kernel, alone=alone)
            return
        for literal in literals_in(value):
            self.add(literal, base, name, launch, kernel, alone=True)


def find_params(source: str) -> list[Param]:
    """The tunable literals of a candidate module, in source order. Raises SyntaxError."""
    tree = ast.parse(source)
    jit = jit_functions(tree)
    module = assignments(tree.body)
    found = _Found(source, jit)
    passed: dict[str, set[str]] = {}
    for launch in launches(tree, jit):
        passed.setdefault(launch.kernel, set())
        for name, value in launch_arguments(launch):
            passed[launch.kernel].add(name)
            if not is_launch_parameter(name, launch.fn):
                continue
            if not isinstance(value, ast.Name):
                found.add_value(value, f"{launch.kernel}.{name}", name, launch.kernel, launch.kernel)
                continue
            constant = constant_for(value, launch, module)
            branches = branch_values(value, launch, tree)
            if constant is not None and len(branches) == 1 and branches[0][0] is constant[0]:
                const_value, key, configures = constant
                found.add_value(const_value, key, name, configures, launch.kernel)
            else:  # set in branches or by unpacking: each value its own param, limited alone
                for branch, key, configures in branches:
                    found.add_value(branch, key, name, configures, launch.kernel, alone=True)
    for kernel, name, default in unpassed_defaults(jit, passed):
        found.add(default, f"{kernel}.{name}", name, kernel, kernel)
    for kernel, fn in jit.items():  # a config list shared by kernels is keyed by the first
        for index, config in autotune_configs(fn, module):
            for name, value in config_arguments(config, fn):
                found.add(value, f"{kernel}.configs[{index}].{name}", name, kernel, kernel, index)
    params = list(found.params.values()) + precision_params(tree, found.offsets, source)
    params += split_params(module, found.offsets)
    params += persistent_params(tree, jit, module, found.offsets, source)
    if not params:
        params = unset_warps(tree, jit, found.offsets, source)
    module_family, families = kernel_family(tree), function_families(tree)
    placed = []
    for p in params:
        # its axis by its kernel's family (a shared constant by the module's); its rank by the
        # module's, so a GEMM's split pass (an elementwise block) waits for the GEMM's tiles
        axis = axis_of(p.kind, p.name, families.get(p.launch, module_family))
        placed.append(replace(p, axis=axis, rank=axis_rank(axis, module_family)))
    return sorted(placed, key=lambda p: p.start)


def unset_warps(tree: ast.Module, jit: dict[str, JitFn], offsets: _Offsets, source: str) -> list[Param]:
    """For a kernel with nothing else to tune (its block set from the shapes, as a whole-row
    reduction's `BLOCK=triton.next_power_of_2(n_cols)`, the only correct choice): each launch of a
    kernel defined here that sets no num_warps gets Triton's default (`DEFAULT_WARPS`) as a param at
    the point before the call's closing parenthesis, where `num_warps=` is written once the tuner
    moves it, so that such a seed is tuned rather than refused. A launch passing `**kwargs` is left
    alone (it may set num_warps); an autotuned kernel's launches are never seen (`launches`)."""
    out: dict[int, Param] = {}  # by position: a launch in a nested function is seen twice
    for launch in launches(tree, jit):
        call = launch.call
        if launch.fn is None or any(k.arg in (None, "num_warps") for k in call.keywords):
            continue
        end = offsets.at(call.end_lineno or call.lineno, (call.end_col_offset or 1) - 1)
        if end in out:
            continue
        given = call.args or call.keywords
        comma = "" if not given or source[:end].rstrip().endswith(",") else ", "
        # keyed as the literal it becomes is (`find_params`), so a child's configs match its parent's
        base = f"{launch.kernel}.num_warps"
        n = sum(1 for p in out.values() if p.launch == launch.kernel)
        key = base if n == 0 else f"{base}#{n + 1}"
        out[end] = Param(
            key,
            "num_warps",
            DEFAULT_WARPS,
            end,
            end,
            call.lineno,
            launch.kernel,
            insert=comma,
            name="num_warps",
        )
    return list(out.values())


def launch_params(source: str) -> list[Param]:
    """`find_params` without the dots' input precisions and the operands' split precision: the
    launch configurations alone (what the recorded H200 grids and landscapes of bench_tuner and
    bench_policy span)."""
    return [p for p in find_params(source) if p.kind not in ("precision", "split")]
