"""What the offline tuner may change in a kernel's source: its tunable launch parameters.

`find_params(source)` reads the module with `ast` and returns the integer literals that set a launch
configuration. It is built from small named decisions, each with its rationale in its docstring:
where the launches are (`launches`), which argument binds to which kernel parameter
(`launch_arguments`), which parameters configure a launch (`is_launch_parameter`), which values are
tuned (`is_tunable`), which names passed to a launch are constants (`constant_for`), the least tile
a `tl.dot` kernel may be given (`dot_floor`), the constexpr defaults no launch overrides
(`unpassed_defaults`), and, for a kernel under `@triton.autotune`, which `triton.Config`s it is given
(`autotune_configs`) and what each sets (`config_arguments`), and, for a persistent launch, how many
programs an SM its grid asks for (`persistent_params`). `tuner.py` searches the values; this module
only finds them.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from itertools import takewhile
from typing import Any, Literal

ParamKind = Literal["num_warps", "num_stages", "meta", "precision", "persistent"]
Assignments = dict[str, list[ast.Assign]]  # name -> every plain `name = ...` of one scope

NUM_WARPS = (1, 2, 4, 8, 16)
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
PROGRAMS_PER_SM = (1, 2, 3, 4, 6, 8)
"""A persistent launch's programs per SM, the values a persistent param takes: one program an SM
is the textbook persistent kernel; more hide a program's prologue and epilogue behind another's
main loop, as long as registers and shared memory let them share an SM."""
SM_COUNT = "multi_processor_count"  # torch.cuda.get_device_properties(...).multi_processor_count


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
        None  # precision: what goes before the added keyword; persistent: the SM count's text
    )
    config: int | None = None  # in an autotuned kernel's i-th triton.Config: its tile is limited alone

    def text(self, value: int) -> str:
        """The source text `value` stands for in this param's span."""
        if self.kind == "persistent" and self.insert is not None:  # an SM count with no factor yet
            return self.insert if value == 1 else f"({self.insert} * {value})"
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
    """The module-level `@triton.jit` functions: only their signatures say which arguments are constexpr."""
    out: dict[str, JitFn] = {}
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
                yield Launch(node, kernel, fn, scope_name, local)


def launch_arguments(launch: Launch) -> list[tuple[str, ast.expr]]:
    """(kernel parameter, argument) pairs: by position for a kernel defined here, by keyword for any."""
    pairs: list[tuple[str, ast.expr]] = []
    if launch.fn is not None:
        params = launch.fn.params
        pairs += [(params[i], a) for i, a in enumerate(launch.call.args) if i < len(params)]
    pairs += [(kw.arg, kw.value) for kw in launch.call.keywords if kw.arg is not None]
    return pairs


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


def is_tunable(kind: ParamKind, value: int) -> bool:
    """Options within Triton's ranges; a meta-parameter only as a power of two of at least 2 (another
    value is a shape, not a tile, and 1 is a flag)."""
    if kind == "num_warps":
        return value in NUM_WARPS
    if kind == "num_stages":
        return value in NUM_STAGES
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


def dot_floor(kind: ParamKind, value: int, fn: JitFn | None) -> int:
    """The least value proposed: in a kernel that calls tl.dot, a meta-parameter stays at 16 or
    more (tl.dot's least dimension) unless it is already smaller."""
    return min(MIN_DOT_DIM, value) if kind == "meta" and fn is not None and fn.uses_dot else META_MIN


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
        self, node: ast.expr, base: str, name: str, launch: str, kernel: str, config: int | None = None
    ) -> None:
        """Add `node` if it is a tunable literal for parameter `name` of `kernel`'s launch (or of its
        `config`-th autotune config). A literal found again keeps its first key, launch and config."""
        value = _int_const(node)
        kind = kind_of(name)
        if value is None or not is_tunable(kind, value):
            return
        floor = dot_floor(kind, value, self.jit.get(kernel))
        span = self.offsets.span(node)
        if span not in self.params:
            key = self.key_for(base)
            self.params[span] = Param(key, kind, value, *span, node.lineno, launch, floor, config=config)
        elif floor > self.params[span].floor:  # a constant or config list shared with a dot kernel
            self.params[span] = replace(self.params[span], floor=floor)


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
                found.add(value, f"{launch.kernel}.{name}", name, launch.kernel, launch.kernel)
            elif (constant := constant_for(value, launch, module)) is not None:
                const_value, key, configures = constant
                found.add(const_value, key, name, configures, launch.kernel)
    for kernel, name, default in unpassed_defaults(jit, passed):
        found.add(default, f"{kernel}.{name}", name, kernel, kernel)
    for kernel, fn in jit.items():  # a config list shared by kernels is keyed by the first
        for index, config in autotune_configs(fn, module):
            for name, value in config_arguments(config, fn):
                found.add(value, f"{kernel}.configs[{index}].{name}", name, kernel, kernel, index)
    params = list(found.params.values()) + precision_params(tree, found.offsets, source)
    params += persistent_params(tree, jit, module, found.offsets, source)
    return sorted(params, key=lambda p: p.start)


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


def launch_params(source: str) -> list[Param]:
    """`find_params` without the dots' input precisions: the launch configurations alone (what
    the recorded H200 grids and landscapes of bench_tuner and bench_policy span)."""
    return [p for p in find_params(source) if p.kind != "precision"]
