"""Shrinking a KernelBench task's sizes for Triton's CPU interpreter (documented, opt-out).

KernelBench files have no `get_cpu_inputs`, and their sizes (8192 x 8192 and more) take the
interpreter minutes a trial. Their sizes are module-level integer constants (`batch_size = 4096`,
`dim = 8192`) that `get_inputs()` / `get_init_inputs()` read. Without a GPU, when a task has no
`get_cpu_inputs` and its work (elements of inputs and parameters, measured on the meta device) is
over `SHRINK_ABOVE_ELEMENTS`, the reference worker loads a copy of the task whose constants are
rewritten to small values, and both workers run the trials on it; the verdict's notes give the
rewrite and the shapes. `--full-size` (`EvalJob.full_size`, or `KERNELCRAFT_SHRINK=off`) runs the
task's own sizes. A task whose work stays over `REFUSE_ABOVE_ELEMENTS` (its sizes are not such
constants) is refused before anything runs, with the estimate and the fix (`get_cpu_inputs`).

Which constants: module-level `NAME = <int>` assignments (or `NAME: int = <int>`, `A = B = <int>`,
arithmetic on literals such as `M = 1024 * 2`, and the int elements of a tuple such as
`input_shape = (32768,)`) that the input functions use, directly or through other module-level
assignments (`features = dim * 2`, which is left as it is and follows `dim`),
with a value over the limit (small ones, like `kernel_size = 3` or `dim = 1`, stay). How they
shrink (`shrink_value`): a value keeps its odd part and as many factors of two as fit under the
limit (4096 -> 64, 393216 = 3 * 2**17 -> 48, 8192 -> 64), so powers of two stay powers of two and
one constant that divides another still does; a value whose odd part is over the limit becomes
its largest divisor in [limit/4, limit], or, failing that, a value under the limit with the
same parity. A model size (one `get_init_inputs` reads) that is a multiple of `TILE` stays one,
at least `MODEL_FLOOR`; sizes are linked (`plan_sizes`) and their ratios kept only within a kind
(the model's, the inputs' own). Given what the candidate's kernels divide the sizes by
(`Multiples`, read by `source/divisors.py`), each shrunk size stays a multiple of those that
divided it. The rewrite edits only the literals' text: the rest of the file is unchanged.

Pure (`ast` only); used by the reference worker (`sizing.py`).
"""

from __future__ import annotations

import ast
import math

from kernelcraft.base.errors import TaskError
from kernelcraft.engine.source.multiples import Multiples
from kernelcraft.engine.source.multiples import twos as _twos

SHRINK_ABOVE_ELEMENTS = 1 << 20
"""Over ~1M elements (inputs + parameters) the interpreter's trials take more than seconds."""
REFUSE_ABOVE_ELEMENTS = 1 << 25
"""Over ~33M elements a verification in the interpreter takes minutes: refused up front."""
LIMITS = (256, 64, 16, 4)
"""The limits tried in turn until the work is under `SHRINK_ABOVE_ELEMENTS`."""
INPUT_FUNCTIONS = ("get_inputs", "get_init_inputs", "get_input_sets")


def shrink_value(v: int, limit: int) -> int:
    """`v` made at most `limit` (see the module docstring); values within it are kept."""
    if v <= limit:
        return v
    odd, twos = v, 0
    while odd % 2 == 0:
        odd, twos = odd // 2, twos + 1
    if odd <= limit:
        while twos and odd * 2 <= limit:
            odd, twos = odd * 2, twos - 1
        return odd
    for d in range(limit, max(2, limit // 4) - 1, -1):
        if v % d == 0:
            return d
    return limit - 1 if (limit - 1) % 2 == v % 2 else limit - 2


_ARITHMETIC = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: lambda a, b: a // b if b else None,
    ast.LShift: lambda a, b: a << b if 0 <= b <= 64 else None,
    ast.Pow: lambda a, b: a**b if 0 <= b <= 64 else None,
}


def int_value(node: ast.expr | None) -> int | None:
    """The value of an integer literal, or of arithmetic on integer literals only (`1024 * 2`,
    `1 << 20`): what KernelBench writes for a size. None for anything else."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
        a, b = int_value(node.left), int_value(node.right)
        if a is not None and b is not None:
            value = _ARITHMETIC[type(node.op)](a, b)
            return value if isinstance(value, int) else None
    return None


Site = tuple[str, ast.expr, int]
"""A size the rewrite may change: its name (`dim`, or `input_shape[0]` for a tuple's element),
the expression that gives it, and its value."""


def _sites(name: str, value: ast.expr | None) -> list[Site]:
    v = int_value(value)
    if v is not None and value is not None:
        return [(name, value, v)]
    if isinstance(value, (ast.Tuple, ast.List)):  # `input_shape = (32768,)`
        return [(f"{name}[{i}]", e, x) for i, e in enumerate(value.elts) if (x := int_value(e)) is not None]
    return []


def size_constants(tree: ast.Module, functions: tuple[str, ...] = INPUT_FUNCTIONS) -> list[Site]:
    """The module-level integer sizes (`NAME = <int>`, `NAME = 1024 * 2`, `A = B = <int>`, a tuple
    of them) that the input functions (or `functions`) read, directly or through other
    module-level assignments."""
    sites: dict[str, list[Site]] = {}
    uses: dict[str, set[str]] = {}  # module-level name -> names its definition reads
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [t.id for t in targets if isinstance(t, ast.Name)]
            read = {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)} if node.value else set()
            for name in names:  # `height = width = 128` gives each name the one expression
                uses[name] = read
                if len(names) == len(targets):
                    sites[name] = _sites(name, node.value)
                else:
                    sites.pop(name, None)
        elif isinstance(node, ast.FunctionDef) and node.name in functions:
            uses.setdefault(f"<{node.name}>", set()).update(
                n.id for n in ast.walk(node) if isinstance(n, ast.Name)
            )
    reached: set[str] = set()
    todo = [f"<{f}>" for f in functions if f"<{f}>" in uses]
    while todo:
        for name in uses.get(todo.pop(), ()):
            if name not in reached:
                reached.add(name)
                todo.append(name)
    return [site for name, found in sites.items() if name in reached for site in found]


MIN_LINKED = 16
"""A size at least this large that divides another by at most the limit is a count or a group
(num_groups 512 of 8192 channels, 16 heads of 1024): the two shrink together, their ratio kept."""


def structure_broken(
    old: dict[str, int],
    new: dict[str, int],
    limit: int,
    counts: set[str] | None = None,
    multiples: Multiples | None = None,
) -> list[str]:
    """What a rewrite `old` -> `new` of a task's sizes breaks of its structure: a ratio between
    two linked sizes over the limit (see `MIN_LINKED`) that changed, two equal sizes made
    different, or, of two sizes `Model` is built with (`counts`: groups, heads, channels; all
    when None), one that divided the other and no longer does or now equals it (a group of one channel: GroupNorm
    then outputs its bias whatever its input). Ratios are kept between sizes of one kind: the
    model's (`counts`) with each other, the inputs' own (batch, image) with theirs; a batch's
    ratio to a channel count is incidental. The ratio of two of the inputs' own sizes may change
    where one keeps what the candidate's kernels divide it by (`multiples`: 8192 columns kept
    at 1024 while 4096 rows go to 128). Empty when the structure is kept."""
    multiples = multiples or Multiples()
    broken: list[str] = []
    names = sorted(old, key=lambda n: old[n])
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            va, vb, na, nb = old[a], old[b], new[a], new[b]
            same_kind = counts is None or (a in counts) == (b in counts)  # a batch is not a channel's
            if va == vb:
                if na != nb and same_kind:
                    broken.append(f"{a} = {b} ({va}) became {na} and {nb}")
                continue
            if va < 2 or vb % va:
                continue
            q = vb // va
            held = (
                counts is not None
                and not {a, b} & counts
                and multiples.need(a, va) * multiples.need(b, vb) > 1
            )
            if (
                va > limit
                and same_kind
                and not held
                and _linked(va, vb, limit)
                and (nb % na or nb // na != q)
            ):
                broken.append(f"{b} / {a} = {q} became {nb}/{na}")
            elif (counts is None or {a, b} <= counts) and (nb % na or nb == na):
                broken.append(f"{a} ({va}) divided {b} ({vb}) {q} times; {na} and {nb} do not keep that")
    return broken


def _linked(va: int, vb: int, limit: int) -> bool:
    lo, hi = sorted((va, vb))
    return lo == hi or (lo >= MIN_LINKED and hi % lo == 0 and hi // lo <= limit)


TILE = 16
"""A model size (one `Model` is built with) that is a multiple of this stays one, and at least
`MODEL_FLOOR` (or its own value, if smaller): a tensor-core path needs C % 16 == 0
(channels-last convolutions), heads and head sizes stay multiples of 16, and a K loop over
BLOCK_K tiles still iterates (64 channels became 1 on a conv, K fell below one BLOCK_K). Such a
size may stay over the limit; the work is then larger, and the structure the GPU's kernel
relies on is there."""
MODEL_FLOOR = 32


def _floor(v: int) -> int:
    return min(v, MODEL_FLOOR) if v % TILE == 0 else 1


def shrink_size(v: int, limit: int, model: bool = False) -> int:
    """`shrink_value(v, limit)`; a model size that is a multiple of `TILE` stays one, at least
    `_floor(v)`."""
    if not model or v % TILE or v <= limit:
        return shrink_value(v, limit)
    q, lim = v // TILE, max(limit, _floor(v)) // TILE
    return TILE * (shrink_value(q, lim) if lim > 1 else 1)


def _tile_twos(v: int) -> int:
    """How many factors of two a model size may lose and keep `_floor` (any, if it has none)."""
    if v % TILE:
        return 64
    t = 0
    while (v >> (t + 1)) % TILE == 0 and v >> (t + 1) >= _floor(v) and (v >> (t + 1)) << (t + 1) == v:
        t += 1
    return t


def _divisor_keeping(v: int, limit: int, keep: list[int], model: bool = False) -> int:
    """`shrink_size(v, limit, model)`, or a divisor of `v` in [limit/4, limit] that every size
    of `keep` dividing `v` still divides (1000 with 4 blocks of layers: 200, not 250)."""
    new = shrink_size(v, limit, model)
    if model and v % TILE == 0:
        return new
    must = [k for k in keep if v % k == 0]
    if all(new % k == 0 for k in must):
        return new
    for d in range(limit, max(2, limit // 4) - 1, -1):
        if v % d == 0 and all(d % k == 0 for k in must):
            return d
    return new


def _keeping_need(v: int, new: int, limit: int, need: int) -> int:
    """`new` if it is a multiple of `need`, else the multiple of `need` the same shrink gives
    `v // need` under `limit // need` (`need` itself when no room is left)."""
    if new % need == 0:
        return new
    lim = limit // need
    return need * (shrink_value(v // need, lim) if lim >= 2 else 1)


def plan_sizes(
    sizes: dict[str, int],
    limit: int,
    keep: frozenset[str] = frozenset(),
    model: frozenset[str] = frozenset(),
    multiples: Multiples | None = None,
) -> dict[str, int]:
    """New values for `sizes` under `limit`; sizes within it stay. The sizes over the limit fall
    into groups of linked sizes (`MIN_LINKED`, equal sizes); each group is divided by one power
    of two, so its ratios stay exact (8192 channels in 512 groups -> 256 in 16); a size linked to
    none, or a group no common power of two brings under the limit, shrinks size by size
    (`shrink_value`, keeping the small sizes that divided it). `structure_broken` says whether
    the result is usable. A model size (`model`) keeps its `TILE` multiple and `_floor` (the
    common power of two is capped so that each keeps them). `keep`: names left as they are.
    `multiples`: each size stays a multiple of `multiples.need` of it (the common power of two
    is capped for it too; a group it leaves none stays as it is)."""
    multiples = multiples or Multiples()
    new = dict(sizes)
    small = [v for v in sizes.values() if 2 <= v <= limit]
    left = {n for n, v in sizes.items() if v > limit and n not in keep}
    while left:
        group, todo = set(), [left.pop()]
        while todo:  # the sizes over the limit linked to this one, directly or through others
            a = todo.pop()
            group.add(a)
            for b in list(left):  # the model's sizes with each other, the inputs' with theirs
                if (a in model) == (b in model) and _linked(sizes[a], sizes[b], limit):
                    left.discard(b)
                    todo.append(b)
        top, twos = max(sizes[n] for n in group), min(_twos(sizes[n]) for n in group)
        twos = min(twos, *(_tile_twos(sizes[n]) for n in group & model), 64)
        left_twos = {n: multiples.twos_left(n, sizes[n]) for n in group}
        capped = min(left_twos.values()) < twos
        if capped and group & model:  # the model's ratios are its structure: one power for all
            twos = min(left_twos.values())
        t = next((t for t in range(1, twos + 1) if top >> t <= limit), twos or None)
        for n in group:
            if len(group) > 1 and capped and not group & model and t is not None:
                # the inputs' own sizes: each as far as the group's power, what its divisors
                # need of it kept (their ratio may change: `structure_broken` allows it)
                new[n] = sizes[n] >> min(t, left_twos[n])
            elif len(group) > 1 and (t is not None or group & model):
                # no common power of two left (a floor reached): the model's linked sizes stay
                # as they are, their ratios kept, while other sizes shrink at this limit
                new[n] = sizes[n] >> t if t is not None else sizes[n]
            else:
                v, need = sizes[n], multiples.need(n, sizes[n])
                if n in model and v % TILE == 0:
                    need = math.lcm(need, TILE)
                new[n] = _keeping_need(v, _divisor_keeping(v, limit, small, n in model), limit, need)
    return new


def model_sizes(source: str) -> frozenset[str]:
    """The size constants `Model` is built with (read by `get_init_inputs`): channels, features,
    groups, heads. The rest (batch, sequence, image sizes) only shape the inputs."""
    return frozenset(name for name, _node, _v in size_constants(ast.parse(source), ("get_init_inputs",)))


def shrunk_source(
    source: str, limit: int, keep: frozenset[str] = frozenset(), multiples: Multiples | None = None
) -> tuple[str, dict[str, tuple[int, int]], list[str]]:
    """`source` with its size constants over `limit` shrunk (`plan_sizes`; those named in `keep`
    left alone, each kept a multiple of what `multiples` needs of it), {name: (old, new)} (empty
    when there is nothing to shrink) and what the rewrite would break of the task's structure
    (`structure_broken`: when not empty, the source is returned unchanged)."""
    tree = ast.parse(source)
    sites = size_constants(tree)
    old = {name: v for name, _node, v in sites}
    counts = {name for name, _node, _v in size_constants(tree, ("get_init_inputs",))}
    new = plan_sizes(old, limit, frozenset(n for n in keep if n in old), frozenset(counts), multiples)
    broken = structure_broken(old, new, limit, counts, multiples)
    if broken:
        return source, {}, broken
    changes: dict[str, tuple[int, int]] = {}
    edits: list[tuple[int, int, int, str]] = []
    for name, node, v in sites:
        if new[name] != v and node.end_lineno == node.lineno and node.end_col_offset is not None:
            changes[name] = (v, new[name])
            edit = (node.lineno, node.col_offset, node.end_col_offset, str(new[name]))
            if edit not in edits:  # a chained assignment's names share one expression
                edits.append(edit)
    lines = source.splitlines(keepends=True)
    for line, col, end_col, text in sorted(edits, reverse=True):
        row = lines[line - 1].encode()
        lines[line - 1] = (row[:col] + text.encode() + row[end_col:]).decode()
    return "".join(lines), changes, []


def given(source: str, values: dict[str, int], task: str = "task") -> tuple[str, dict[str, tuple[int, int]]]:
    """`source` with the size constants named in `values` set to them (the user's CPU sizes,
    `--cpu-sizes` or a sidecar file), {name: (old, new)}. `TaskError` for a name that is not one
    of its size constants (the message lists them) or a value under 1."""
    tree = ast.parse(source)
    sites = {name: (node, v) for name, node, v in size_constants(tree)}
    unknown = sorted(set(values) - set(sites))
    if unknown or any(v < 1 for v in values.values()):
        known = ", ".join(f"{n}={v}" for n, (_node, v) in sites.items()) or "none"
        what = (
            f"{', '.join(unknown)} {'is' if len(unknown) == 1 else 'are'} not"
            if unknown
            else "a size under 1 is not"
        )
        raise TaskError(
            f"--cpu-sizes: {what} among the task's size constants the inputs read ({known}); give "
            "NAME=N for those, each at least 1",
            path=task,
        )
    edits: dict[tuple[int, int, int], str] = {}
    changes: dict[str, tuple[int, int]] = {}
    for name, value in values.items():
        node, v = sites[name]
        if value == v:
            continue
        if node.end_lineno != node.lineno or node.end_col_offset is None:
            raise TaskError(f"--cpu-sizes: {name} is written over several lines; write it on one", path=task)
        edits[(node.lineno, node.col_offset, node.end_col_offset)] = str(value)
        changes[name] = (v, value)
    lines = source.splitlines(keepends=True)
    for (line, col, end_col), text in sorted(edits.items(), reverse=True):
        row = lines[line - 1].encode()
        lines[line - 1] = (row[:col] + text.encode() + row[end_col:]).decode()
    return "".join(lines), changes


def describe(changes: dict[str, list[int]], shapes: str, given: bool = False) -> str:
    """The verdict's note on a shrunk task."""
    rewrite = ", ".join(f"{k} {old} -> {new}" for k, (old, new) in changes.items())
    if given:
        return f"ran at the sizes given for the CPU ({rewrite}; inputs {shapes}); a GPU runs the task's own"
    return (
        f"ran at shrunk sizes for Triton's CPU interpreter ({rewrite}; inputs {shapes}): the task's "
        "own sizes would take minutes a trial; pass --full-size to run them, or define get_cpu_inputs()"
    )


def check_interpreter_work(
    elements: int, shapes: str, task: str, params_bytes: int = 0, not_shrunk: str | None = None
) -> None:
    """Refuse (`TaskError`) a task the interpreter would take minutes a trial on, left that
    large after shrinking (its sizes are not constants this module can rewrite, or rewriting them
    would break its structure: `not_shrunk`). Nothing of the task has been allocated yet: its
    sizes were measured on the meta device."""
    if elements > REFUSE_ABOVE_ELEMENTS:
        params = f", parameters {params_bytes / 1024**3:.3g} GiB" if params_bytes else ""
        why = not_shrunk or "its sizes are not module-level integer constants kernelcraft can shrink"
        raise TaskError(
            f"too big for Triton's CPU interpreter: {elements:.3g} elements in inputs and parameters "
            f"(inputs {shapes}{params}), minutes a trial, and {why}; define get_cpu_inputs() "
            "returning small inputs, run on a GPU, or pass --full-size to run it anyway (refused "
            "before anything was allocated)",
            path=task,
        )
