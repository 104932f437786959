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

Which constants: module-level `NAME = <int>` (or `NAME: int = <int>`) assignments that the
input functions use, directly or through other module-level assignments (`features = dim * 2`),
with a value over the limit (small ones, like `kernel_size = 3` or `dim = 1`, stay). How they
shrink (`shrink_value`): a value keeps its odd part and as many factors of two as fit under the
limit (4096 -> 64, 393216 = 3 * 2**17 -> 48, 8192 -> 64), so powers of two stay powers of two and
one constant that divides another still does; a value whose odd part is over the limit becomes
its largest divisor in [limit/4, limit], or, failing that, a value under the limit with the
same parity. The rewrite edits only the literals' text: the rest of the file is unchanged.

Pure (`ast` only); used by the reference worker (`sizing.py`).
"""

from __future__ import annotations

import ast

from kernelcraft.base.errors import TaskError

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


def _int_literal(node: ast.expr | None) -> ast.Constant | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node
    return None


def size_constants(tree: ast.Module) -> dict[str, ast.Constant]:
    """The module-level `NAME = <int>` literals the input functions read, directly or through
    other module-level assignments."""
    literals: dict[str, ast.Constant] = {}
    uses: dict[str, set[str]] = {}  # module-level name -> names its definition reads
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [t.id for t in targets if isinstance(t, ast.Name)]
            lit = _int_literal(node.value)
            read = {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)} if node.value else set()
            for name in names:
                uses[name] = read
                if lit is not None and len(names) == 1:
                    literals[name] = lit
                else:
                    literals.pop(name, None)
        elif isinstance(node, ast.FunctionDef) and node.name in INPUT_FUNCTIONS:
            uses.setdefault(f"<{node.name}>", set()).update(
                n.id for n in ast.walk(node) if isinstance(n, ast.Name)
            )
    reached: set[str] = set()
    todo = [f"<{f}>" for f in INPUT_FUNCTIONS if f"<{f}>" in uses]
    while todo:
        for name in uses.get(todo.pop(), ()):
            if name not in reached:
                reached.add(name)
                todo.append(name)
    return {k: v for k, v in literals.items() if k in reached}


def shrunk_source(source: str, limit: int) -> tuple[str, dict[str, tuple[int, int]]]:
    """`source` with its size constants over `limit` shrunk, and {name: (old, new)} (empty when
    there is nothing to shrink)."""
    tree = ast.parse(source)
    changes: dict[str, tuple[int, int]] = {}
    edits: list[tuple[int, int, int, str]] = []
    for name, lit in size_constants(tree).items():
        old = int(lit.value)  # type: ignore[arg-type]  # an int literal (size_constants)
        new = shrink_value(old, limit)
        if new != old and lit.end_lineno == lit.lineno and lit.end_col_offset is not None:
            changes[name] = (old, new)
            edits.append((lit.lineno, lit.col_offset, lit.end_col_offset, str(new)))
    lines = source.splitlines(keepends=True)
    for line, col, end_col, text in sorted(edits, reverse=True):
        row = lines[line - 1].encode()
        lines[line - 1] = (row[:col] + text.encode() + row[end_col:]).decode()
    return "".join(lines), changes


def describe(changes: dict[str, list[int]], shapes: str) -> str:
    """The verdict's note on a shrunk task."""
    rewrite = ", ".join(f"{k} {old} -> {new}" for k, (old, new) in changes.items())
    return (
        f"ran at shrunk sizes for Triton's CPU interpreter ({rewrite}; inputs {shapes}): the task's "
        "own sizes would take minutes a trial; pass --full-size to run them, or define get_cpu_inputs()"
    )


def check_interpreter_work(elements: int, shapes: str, task: str) -> None:
    """Refuse (`TaskError`) a task the interpreter would take minutes a trial on, left that
    large after shrinking (its sizes are not constants this module can rewrite)."""
    if elements > REFUSE_ABOVE_ELEMENTS:
        raise TaskError(
            f"too big for Triton's CPU interpreter: {elements:.3g} elements in inputs and parameters "
            f"({shapes}), minutes a trial, and its sizes are not module-level integer constants "
            "kernelcraft can shrink; define get_cpu_inputs() returning small inputs, run on a GPU, "
            "or pass --full-size to run it anyway",
            path=task,
        )
