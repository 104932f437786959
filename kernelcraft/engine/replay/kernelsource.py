"""A kernel as its source text: described in the candidate's process, rebuilt where no candidate
Python runs.

`describe` (the candidate's side) takes a launched kernel's source from `def` (Triton's own
`JITFunction` source) and the names it reads outside itself, each with its value encoded
(`program.encode_plain`): a Triton module, a constant, another `@triton.jit` function, or
`opaque` for any other Python object. `build` (the trusted side: the reference worker, the GPU
check's compiler) rebuilds every kernel of a `Program` from that text with `triton.jit`, in a
namespace holding only `triton.language`, the recorded constants and the other rebuilt kernels,
under a short list of builtins; before it does, `check` refuses a kernel that is not Triton
language: one that reads a Python object (numpy, a function, an object), imports, defines
functions or classes, reaches private or dunder attributes, reaches a module outside
`triton.language` through an attribute, or touches an interpreter tensor's `handle` (its numpy
data). Under Triton's interpreter a kernel body is Python: this is what keeps a body that does
its work in numpy (or any Python object) from running in the trusted process.

What `check` refuses, a candidate gets back as `forbidden_construct` with the kernel and the name.
Written by the evaluation engine only.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import linecache
import symtable
import types
from collections.abc import Callable
from typing import Any

from kernelcraft.engine.replay.program import KernelDesc, decode_constant, encode_plain

SAFE_BUILTINS = (
    "range",
    "min",
    "max",
    "len",
    "int",
    "float",
    "bool",
    "abs",
    "print",
    "isinstance",
    "tuple",
    "list",
    "enumerate",
    "zip",
    "divmod",
    "round",
    "pow",
    "all",
    "any",
    "reversed",
    "slice",
    "AssertionError",
    "ValueError",
    "True",
    "False",
    "None",
)
"""Python builtins a kernel body may name (what Triton's compiler takes in a kernel)."""
TRITON_TOP = frozenset({"language", "cdiv", "next_power_of_2", "jit", "constexpr"})
"""What a kernel may reach on the `triton` module itself."""
BANNED_ATTRS = frozenset({"handle"})
"""Interpreter internals: a tensor's `handle` holds its numpy data."""
_REFUSED_NODES: dict[type, str] = {
    ast.Import: "an import",
    ast.ImportFrom: "an import",
    ast.Global: "a global statement",
    ast.Nonlocal: "a nonlocal statement",
    ast.ClassDef: "a class",
    ast.AsyncFunctionDef: "an async function",
    ast.Lambda: "a lambda",
    ast.Await: "an await",
    ast.Yield: "a yield",
    ast.YieldFrom: "a yield",
}


class KernelRefused(Exception):
    """A recorded kernel that is not Triton language (the verdict's message)."""


# --------------------------------------------------------------------------------------------
# The candidate's side


def describe(fn: Any, kernel_index: Callable[[Any], int]) -> KernelDesc:
    """The launched kernel `fn` (a JITFunction or an interpreter InterpretedFunction) as data."""
    from kernelcraft.engine.watch.records import jit_function_for

    jit = jit_function_for(fn)
    pyfn = jit.fn
    source = str(getattr(jit, "_src", None) or jit.src)
    closure = _closure(pyfn)
    found: dict[str, Any] = {}
    for name in _outside_names(source):
        if name in closure:
            value = closure[name]
        elif name in pyfn.__globals__:
            value = pyfn.__globals__[name]
        else:
            continue  # a builtin, or undefined: the trusted side decides
        if isinstance(value, types.ModuleType):
            found[name] = {"module": value.__name__}
        elif _is_constexpr(value):  # `BLOCK = tl.constexpr(256)`: the compiler reads only these
            found[name] = {"constexpr": encode_plain(value.value, kernel_index)}
        else:
            found[name] = encode_plain(value, kernel_index)
    dns = getattr(jit, "do_not_specialize", None) or []
    return KernelDesc(
        name=pyfn.__name__,
        source=source,
        globals=found,
        do_not_specialize=[x for x in dns if isinstance(x, (int, str))],
        noinline=getattr(jit, "noinline", None),
    )


def _is_constexpr(value: Any) -> bool:
    import triton.language as tl

    return isinstance(value, tl.constexpr)


def _closure(fn: Any) -> dict[str, Any]:
    cells = fn.__closure__ or ()
    out = {}
    for name, cell in zip(fn.__code__.co_freevars, cells, strict=False):
        with contextlib.suppress(ValueError):  # an empty cell
            out[name] = cell.cell_contents
    return out


def _outside_names(source: str) -> list[str]:
    """Names the function in `source` reads from outside itself (globals, closure, builtins)."""
    try:
        table = symtable.symtable(source, "<kernel>", "exec")
    except SyntaxError:
        return []
    names: list[str] = []
    for fn_table in table.get_children():
        stack = [(fn_table, True)]
        while stack:
            t, root = stack.pop()
            names.extend(s.get_name() for s in t.get_symbols() if s.is_global() or (root and s.is_free()))
            stack.extend((c, False) for c in t.get_children())
    return list(dict.fromkeys(names))


# --------------------------------------------------------------------------------------------
# The trusted side


def check(desc: KernelDesc, count: int) -> None:
    """Raise `KernelRefused` unless `desc` reads only Triton, constants, builtins Triton takes
    and other kernels (indices below `count`), and its body is Triton language."""
    name = desc.name
    try:
        tree = ast.parse(desc.source)
    except SyntaxError as e:
        raise KernelRefused(f"the recorded source of kernel {name} does not parse ({e.msg})") from None
    body = tree.body
    if len(body) != 1 or not isinstance(body[0], ast.FunctionDef) or body[0].name != name:
        raise KernelRefused(f"the recorded source of kernel {name} is not one function named {name}")
    if body[0].decorator_list:
        raise KernelRefused(f"the recorded source of kernel {name} carries decorators")
    for node in ast.walk(body[0]):
        what = _REFUSED_NODES.get(type(node))
        if what is None and isinstance(node, ast.FunctionDef) and node is not body[0]:
            what = "a nested function"
        if what is not None:
            raise KernelRefused(
                f"kernel {name} contains {what} (line {getattr(node, 'lineno', '?')}): a kernel body "
                "must be Triton language"
            )
        if isinstance(node, ast.Attribute) and (node.attr.startswith("_") or node.attr in BANNED_ATTRS):
            raise KernelRefused(
                f"kernel {name} reaches the attribute {node.attr!r} (line {node.lineno}): a kernel body "
                "must be Triton language, not Python reaching into objects"
            )
        if isinstance(node, ast.Name) and node.id.startswith("__"):
            raise KernelRefused(f"kernel {name} names {node.id!r} (line {node.lineno})")
    for outside in _outside_names(desc.source):
        _check_name(desc, outside, count)
    _check_chains(desc, body[0])


def _check_name(desc: KernelDesc, name: str, count: int) -> None:
    value = desc.globals.get(name)
    if value is None:
        if name in SAFE_BUILTINS:
            return
        raise KernelRefused(
            f"kernel {desc.name} reads {name!r}, which is neither Triton, a constant nor a builtin "
            "Triton takes"
        )
    if not isinstance(value, dict) or len(value) != 1:
        raise KernelRefused(f"kernel {desc.name}: the value recorded for {name!r} is malformed")
    ((tag, inner),) = value.items()
    if tag == "constexpr":  # a module-level tl.constexpr: what it holds is checked as a constant
        if not isinstance(inner, dict) or len(inner) != 1 or next(iter(inner)) in ("module", "kernel"):
            raise KernelRefused(f"kernel {desc.name}: the value recorded for {name!r} is malformed")
        ((tag, inner),) = inner.items()
    if tag == "module":
        if not _allowed_module(str(inner)):
            raise KernelRefused(
                f"kernel {desc.name} reads {name!r}, the Python module {str(inner)[:80]!r}: a kernel body "
                "must be Triton language (triton.language); Python modules (numpy, math, torch) run on "
                "the host, not in the kernel"
            )
        return
    if tag == "kernel":
        if not isinstance(inner, int) or not 0 <= inner < count:
            raise KernelRefused(f"kernel {desc.name}: {name!r} names no recorded kernel")
        return
    if tag == "opaque":
        raise KernelRefused(
            f"kernel {desc.name} reads {name!r}, a Python object ({str(inner)[:80]}): a kernel may read "
            "only tl.constexpr constants, Triton and other @triton.jit functions; a Python function or "
            "object it calls runs on the host, not in the kernel"
        )
    if tag in ("list", "tuple", "dict"):
        raise KernelRefused(
            f"kernel {desc.name} reads {name!r}, a Python container: use tl.constexpr constants"
        )


def _allowed_module(name: str) -> bool:
    return name in ("triton", "triton.language") or name.startswith("triton.language.")


def _check_chains(desc: KernelDesc, fn: ast.FunctionDef) -> None:
    """Every attribute chain from a module the kernel reads must stay in triton.language."""
    import importlib

    modules = {
        k: v["module"]
        for k, v in desc.globals.items()
        if isinstance(v, dict) and "module" in v and _allowed_module(str(v["module"]))
    }
    for node in ast.walk(fn):
        if not isinstance(node, ast.Attribute):
            continue
        chain: list[str] = []
        base: ast.expr = node
        while isinstance(base, ast.Attribute):
            chain.append(base.attr)
            base = base.value
        if not isinstance(base, ast.Name) or base.id not in modules:
            continue
        obj: Any = importlib.import_module(modules[base.id])
        for attr in reversed(chain):
            if isinstance(obj, types.ModuleType) and obj.__name__ == "triton" and attr not in TRITON_TOP:
                raise KernelRefused(
                    f"kernel {desc.name} reaches triton.{attr}: a kernel may use triton.language"
                )
            obj = getattr(obj, attr, _MISSING)
            if obj is _MISSING:
                raise KernelRefused(
                    f"kernel {desc.name} reaches {'.'.join(reversed(chain))}, which Triton lacks"
                )
            if isinstance(obj, types.ModuleType) and not _allowed_module(obj.__name__):
                raise KernelRefused(
                    f"kernel {desc.name} reaches the module {obj.__name__} through "
                    f"{base.id}.{'.'.join(reversed(chain))}: a kernel body must be Triton language"
                )
            if not isinstance(obj, types.ModuleType):
                break


_MISSING = object()


def build(descs: list[KernelDesc]) -> list[Any]:
    """Every kernel of a program rebuilt from its source with `triton.jit` (an interpreter
    function where TRITON_INTERPRET=1, else a JITFunction), after `check`."""
    built: dict[int, Any] = {}
    for i in range(len(descs)):
        _build(descs, i, built, set())
    return [built[i] for i in range(len(descs))]


def _build(descs: list[KernelDesc], index: int, built: dict[int, Any], busy: set[int]) -> Any:
    if index in built:
        return built[index]
    if index in busy:
        raise KernelRefused(f"kernel {descs[index].name} calls itself through other kernels")
    busy.add(index)
    desc = descs[index]
    check(desc, len(descs))
    import triton
    import triton.language as tl

    allowed = {n: getattr(builtins, n) for n in SAFE_BUILTINS if hasattr(builtins, n)}
    namespace: dict[str, Any] = {
        "__builtins__": allowed,
        "__name__": "kernelcraft_replayed_kernels",
        "tl": tl,
    }
    import importlib

    for name, value in desc.globals.items():
        ((tag, inner),) = value.items()
        if tag == "module":
            namespace[name] = importlib.import_module(str(inner))
        elif tag == "kernel":
            namespace[name] = _build(descs, int(inner), built, busy)
        elif tag == "constexpr":  # as the module had it: Triton's compiler reads no other global
            namespace[name] = tl.constexpr(decode_constant(inner))
        else:
            namespace[name] = decode_constant(value)
    filename = f"<kernelcraft replay: kernel {desc.name} #{index}>"
    lines = desc.source.splitlines(keepends=True)
    linecache.cache[filename] = (len(desc.source), None, lines, filename)
    exec(compile(desc.source, filename, "exec"), namespace)  # noqa: S102 - checked Triton source
    fn = namespace[desc.name]
    kwargs: dict[str, Any] = {}
    if desc.do_not_specialize:
        kwargs["do_not_specialize"] = list(desc.do_not_specialize)
    if desc.noinline is not None:
        kwargs["noinline"] = bool(desc.noinline)
    kernel = triton.jit(fn, **kwargs)
    built[index] = kernel
    busy.discard(index)
    return kernel


# --------------------------------------------------------------------------------------------
# The trusted side, on the submitted text: what the record claims must be what was sent


def not_submitted(kernels: list[KernelDesc], texts: list[str]) -> str | None:
    """Why a record's kernels are not all in the submitted sources `texts`, or None. The record is
    written in the candidate's process, which may describe a kernel other than the one that ran:
    every recorded kernel's text must be in what was sent (a kernel made at run time, from a
    string, cannot be checked)."""
    sent = [_stripped(t) for t in texts]
    for desc in kernels:
        if not any(_stripped(desc.source) in t for t in sent):
            return (
                f"the record's kernel {desc.name} is not in the candidate's source: a kernel made at run "
                "time (from a string, exec) cannot be checked; define kernels with @triton.jit in the module"
            )
    return None


def submitted_problems(source: str) -> str | None:
    """Why a `@triton.jit` function of the submitted `source` is not Triton language by the rules
    of `check`, read from the source alone (whatever the record says ran): no imports, nested
    functions, private attributes or `handle`, and no name the module binds to a non-Triton
    module, a plain Python function or a class. None when every one is."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return "the candidate's source does not parse"
    bound = _module_bindings(tree)
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef) or not _is_kernel(fn):
            continue
        desc = KernelDesc(
            name=fn.name, source=ast.unparse(fn).split("\n", len(fn.decorator_list))[-1], globals={}
        )
        # The body and signature only: decorators (`@triton.heuristics({...: lambda args: ...})`,
        # an autotune's hooks) are host code, run at launch like forward's; the record keeps what
        # they chose, and the replay rebuilds the kernel without them.
        for node in (n for part in (fn.args, *fn.body) for n in ast.walk(part)):
            what = _REFUSED_NODES.get(type(node))
            if what is None and isinstance(node, ast.FunctionDef):
                what = "a nested function"
            if what is not None:
                return f"kernel {fn.name} contains {what} (line {getattr(node, 'lineno', '?')}): a kernel body must be Triton language"
            if isinstance(node, ast.Attribute) and (node.attr.startswith("_") or node.attr in BANNED_ATTRS):
                return f"kernel {fn.name} reaches the attribute {node.attr!r} (line {node.lineno})"
        for name in _outside_names(desc.source):
            kind = bound.get(name)
            if kind is not None:
                return (
                    f"kernel {fn.name} reads {name!r}, {kind} of the candidate's module: a kernel body must "
                    "be Triton language; Python it calls runs on the host, not in the kernel"
                )
    return None


def _stripped(text: str) -> str:
    return "\n" + "\n".join(line.strip() for line in text.splitlines() if line.strip()) + "\n"


def _is_kernel(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    for d in fn.decorator_list:
        target = d.func if isinstance(d, ast.Call) else d
        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
        if name == "jit":
            return True
    return False


def _module_bindings(tree: ast.Module) -> dict[str, str]:
    """Module-level names a kernel may not read: non-Triton modules, plain functions, classes."""
    out: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Import):
            for a in node.names:
                if not _allowed_module(a.name) and not (a.asname is None and a.name == "triton"):
                    out[a.asname or a.name.split(".")[0]] = f"the module {a.name}"
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if not (module == "triton" or module.startswith("triton.language")):
                for a in node.names:
                    out[a.asname or a.name] = f"{a.name} from {module or '.'}"
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not _is_kernel(node):
            out[node.name] = "a plain Python function"
        elif isinstance(node, ast.ClassDef):
            out[node.name] = "a class"
    return out
