"""Branches of the candidate's host Python on the device, which a CPU verdict does not take.

Without a GPU the trials run on CPU tensors (Triton's interpreter), and `compile` finds launches on
meta tensors that say they are on CUDA (`watch/fakecuda.py`). A forward that asks where its
tensors live (`x.is_cuda`, `x.device.type != "cuda"`) takes the GPU's way in `compile` (its
kernels are compiled) but not in the trials (they are not run); one that asks `torch.cuda`
(`is_available()`, `device_count()`) takes the CPU's way in both. This pass reads the candidate's
source (`ast` only, in the parent: nothing of it runs) and names each such test, its line, and the
kernels launched in the branch's body (`kernel[grid](...)`), for the verdict's notes; for a test of
`torch.cuda` it suggests asking the tensors instead.

Host code with no CPU way at all (`assert x.is_cuda`, `if not x.is_cuda: raise`, `.cuda()`,
`device="cuda"`, `torch.cuda.get_device_properties`, Triton's `driver.active`: `no_cpu_way`) cannot run the CPU's way; its trials run the GPU's way instead, on
CPU tensors that say they are on CUDA (`watch/fakecuda.py`), and the note says so.

Limits: a test reached through a helper's parameter or a global is named where it is written; a
kernel launched by a helper the branch calls is not followed (the helper's name is given).
"""

from __future__ import annotations

import ast
import builtins
import re

_DEVICE_ATTRS = {"is_cuda", "is_cpu", "is_meta"}
_DEVICE_CALLS = {"is_available", "device_count"}


def _asks_torch_cuda(test: str) -> bool:
    """A device test (its text) that asks `torch.cuda`, not the tensors: the CPU's way everywhere."""
    return any(f"cuda.{call}" in test for call in _DEVICE_CALLS)


_BUILTINS = frozenset(dir(builtins))


def _asks_device(test: ast.AST) -> bool:
    for node in ast.walk(test):
        if isinstance(node, ast.Attribute):
            if node.attr in _DEVICE_ATTRS:
                return True
            if node.attr == "type" and isinstance(node.value, ast.Attribute) and node.value.attr == "device":
                return True
            if node.attr == "device" and isinstance(node.ctx, ast.Load):
                parent_compare = isinstance(test, ast.Compare)
                if parent_compare:
                    return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            f = node.func
            if f.attr in _DEVICE_CALLS and isinstance(f.value, ast.Attribute) and f.value.attr == "cuda":
                return True
    return False


def _launched(body: list[ast.stmt]) -> list[str]:
    """Kernels launched (`k[grid](...)`) and functions called by name in `body`."""
    names: list[str] = []
    for stmt in body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Call):
                f = node.func.value if isinstance(node.func, ast.Subscript) else node.func
                if isinstance(f, ast.Name) and f.id not in _BUILTINS:
                    names.append(f.id)
    return list(dict.fromkeys(names))


def _is_kernel(fn: ast.AST) -> bool:
    decorators = getattr(fn, "decorator_list", [])
    return any("jit" in ast.unparse(d) or "autotune" in ast.unparse(d) for d in decorators)


def branches(source: str) -> list[tuple[int, str, list[str]]]:
    """(line, the test's text, what the branch launches or calls) for each device test in host code."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    kernels = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and _is_kernel(n)}
    found: dict[tuple[int, str], list[str]] = {}
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef) or _is_kernel(fn):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.If | ast.While) and _asks_device(node.test):
                called = _launched([*node.body, *node.orelse])
            elif isinstance(node, ast.IfExp) and _asks_device(node.test):
                called = _launched([ast.Expr(node.body), ast.Expr(node.orelse)])
            else:
                continue
            named = [f"{c} (a kernel)" if c in kernels else c for c in called]
            found[(node.lineno, ast.unparse(node.test)[:120])] = named[:8]
    return [(line, test, called) for (line, test), called in sorted(found.items())]


_CUDA_FACTS = re.compile(
    r"(^|\.)cuda\.(get_device_properties|get_device_name|get_device_capability|current_device|set_device"
    r"|device|synchronize)$"
)
"""`torch.cuda` calls that need a GPU, answered on the CPU (`watch/fakecuda.FAKED_TORCH_CUDA`)."""


def _names_cuda(call: ast.Call) -> bool:
    """`.cuda()`, a `torch.cuda` device fact, Triton's `driver.active`, or "cuda"/"cuda:N" given as
    an argument (`device="cuda"`, `.to("cuda")`)."""
    if isinstance(call.func, ast.Attribute) and call.func.attr == "cuda":
        return True
    func = ast.unparse(call.func)
    if _CUDA_FACTS.search(func) or re.search(r"(^|\.)driver\.active\.", func):
        return True
    given = [*call.args, *(k.value for k in call.keywords)]
    return any(
        isinstance(a, ast.Constant) and isinstance(a.value, str) and re.fullmatch(r"cuda(:\d+)?", a.value)
        for a in given
    )


def no_cpu_way(source: str) -> list[tuple[int, str]]:
    """(line, text) of each place in host code (kernels aside) that has no CPU way: an assertion on
    the tensors' device, a raise in a branch on it, a `.cuda()` or a device named "cuda" (unless
    the host code also branches on the tensors' device without raising: a CPU way of its own).
    Empty when there is none (or the source does not parse)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    kernels = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and _is_kernel(n)]
    inside = {id(n) for k in kernels for n in ast.walk(k)}
    host = [node for node in ast.walk(tree) if id(node) not in inside]
    # A branch on the tensors' device that does not raise is a CPU way the candidate wrote (the
    # cookbook's softmax runs its two-pass kernel there, where the GPU's spin-waiting one would
    # never end in the interpreter): its CUDA calls are then the GPU branch's, not the only way.
    cpu_way = any(
        isinstance(node, ast.If | ast.IfExp | ast.While)
        and _asks_device(node.test)
        and not any(isinstance(x, ast.Raise) for x in ast.walk(node))
        and not _asks_torch_cuda(ast.unparse(node.test))
        for node in host
    )
    found: dict[int, str] = {}
    for node in host:
        if isinstance(node, ast.Assert) and _asks_device(node.test):
            hit = True
        elif isinstance(node, ast.If) and _asks_device(node.test):
            hit = any(isinstance(s, ast.Raise) for s in [*node.body, *node.orelse])
        else:
            hit = not cpu_way and isinstance(node, ast.Call) and _names_cuda(node)
        if hit:
            found.setdefault(getattr(node, "lineno", 0), ast.unparse(node).splitlines()[0][:100])
    return sorted(found.items())


def note(source: str) -> list[str]:
    """The verdict's note on a candidate whose host code branches on the device (empty if none)."""
    cuda_only = no_cpu_way(source)
    if cuda_only:
        where = "; ".join(f"line {line} `{text}`" for line, text in cuda_only[:4])
        return [
            f"forward's host code has no CPU way ({where}): these CPU trials ran it the GPU's way, on CPU "
            "tensors that say they are on cuda:0, its CUDA allocations made on the CPU "
            "and its device facts (`torch.cuda.get_device_properties`, Triton's `driver.active`) those of "
            "one H200 (`watch/fakecuda.py`); streams are not faked"[:1200]
        ]
    found = branches(source)
    if not found:
        return []
    lines = "; ".join(
        f"line {line} `{test}`" + (f" (its branches launch or call {', '.join(called)})" if called else "")
        for line, test, called in found[:4]
    )
    if not any(
        _asks_torch_cuda(test) for _line, test, _called in found
    ):  # a test of the tensors' device: compile's tensors say CUDA (watch/fakecuda.py)
        return [
            f"forward branches on the device ({lines}): these CPU trials ran the interpreter's way; "
            "the GPU's way was compiled (`compile`, meta tensors seen as CUDA), not run"[:1200]
        ]
    return [
        f"forward branches on the device ({lines}): on a GPU it may take a way that neither these CPU "
        "trials nor `compile` took (`torch.cuda` is not faked there), and what only that way launches is "
        "not checked here. Ask the tensors instead (`x.is_cuda`, `x.device.type`), so that `compile` "
        "takes the GPU's way"[:1200]
    ]
