"""Triton's own code, as it was before the candidate was imported: what a launch may run.

`launches.in_triton_launch` lets a PyTorch op through as Triton's own only when every frame from
the op out to one of our launch frames runs code listed here with the globals listed with it.
`trust_triton()` takes that list once, from Triton's loaded modules, before any candidate code is
imported (`guard.Integrity` calls it); later calls do nothing, so what a candidate adds to
Triton's modules is never trusted. Runs in the candidate's worker only.
"""

from __future__ import annotations

import functools
import sys
import types
from typing import Any

_trusted_code: dict[Any, dict[str, Any]] = {}
TRACER_MODULE = "kernelcraft.engine.replay.traced"
"""Loaded before `trust_triton` runs (the worker's `freeze` imports it)."""


def trust_triton() -> None:
    """Take the code objects of Triton's loaded modules (functions, methods, properties and the
    code nested in them), each with its module's globals: what `in_triton_launch` accepts as
    Triton's own. Call it before any candidate code is imported (guard.Integrity does); later
    calls do nothing, so what a candidate adds to Triton's modules is never trusted."""
    if _trusted_code:
        return
    import triton.runtime.interpreter  # noqa: F401 - the interpreter's copies run inside a launch
    import triton.testing  # noqa: F401 - the autotuner's benchmarking runs it inside a launch

    found: dict[Any, dict[str, Any]] = {}
    for name, mod in list(sys.modules.items()):
        if mod is None or not (name == "triton" or name.startswith("triton.")):
            continue
        scope = vars(mod)
        for value in list(scope.values()):
            if isinstance(value, type) and getattr(value, "__module__", None) == name:
                for member in list(vars(value).values()):
                    _collect(member, scope, found)
            else:
                _collect(value, scope, found)
    # The harness's host-read tracer (a torch function mode, `replay/traced.py`) puts its handler's
    # frame between Triton's code and each op Triton issues during a launch; it only forwards.
    tracer = sys.modules.get(TRACER_MODULE)
    if tracer is not None:
        for member in list(vars(tracer.ReadTracer).values()):
            _collect(member, vars(tracer), found)
    _trusted_code.update(found)


def _collect(obj: Any, scope: dict[str, Any], found: dict[Any, dict[str, Any]]) -> None:
    """Record the code of a function of `scope`'s module (through decorators and descriptors)."""
    for _ in range(8):  # unwrap staticmethod, classmethod, property, functools.wraps chains
        if isinstance(obj, staticmethod | classmethod):
            obj = obj.__func__
        elif isinstance(obj, functools.cached_property):
            obj = obj.func
        elif isinstance(obj, property):
            for part in (obj.fget, obj.fset, obj.fdel):
                if part is not None:
                    _collect(part, scope, found)
            return
        elif isinstance(obj, types.FunctionType) and obj.__globals__ is not scope:
            obj = getattr(obj, "__wrapped__", None)  # a wrapper from elsewhere (functools, contextlib)
        else:
            break
    if not isinstance(obj, types.FunctionType) or obj.__globals__ is not scope:
        return
    stack = [obj.__code__]
    while stack:
        code = stack.pop()
        if code in found:
            continue
        found[code] = scope
        stack.extend(c for c in code.co_consts if isinstance(c, types.CodeType))


def table() -> dict[Any, dict[str, Any]]:
    """Each trusted code object with its module's globals (filled before the first interception)."""
    return _trusted_code
