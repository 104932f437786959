"""The harness's objects in the candidate's process, member by member.

`guard.Integrity` watches named functions by identity; a candidate that reaches a harness module
(through `sys.modules`, however it got there) can instead change what those names hold inside:
a method in a class's dict (`OpRecorder.__init__`, `Integrity.changed`), a function's
`__code__` or defaults, a module global rebound or added (a global named `isinstance` in a harness
module shadows the builtin there), a member of the dispatch-mode base class the recorder relies
on (`TorchDispatchMode.__enter__`), of `torch.Tensor` or of `torch.nn.Module`. `snapshot`
flattens all of that into one dict of "where -> object", taken before the candidate is
imported; `differences` names every entry that is now another object, gone, or new. Only identities are kept: nothing is copied; a check of
the ~4400 entries takes ~2.5 ms.

Module state the harness itself rebinds while it runs is named in `REBOUND` and left out.
Written by the evaluation engine only; runs in the candidate worker.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

REBOUND = frozenset({"kernelcraft.engine.watch.launches._active"})
"""Module globals the harness rebinds while it runs (`global` statements)."""

_FUNCTION_PARTS = ("__code__", "__defaults__", "__kwdefaults__", "__globals__")


def snapshot(modules: Iterable[str], classes: Iterable[type]) -> dict[str, Any]:
    """Every global of each module in `modules` (those imported), every member of each class
    defined there and of `classes`, and the code, defaults and globals of every function among
    them, by where each is found."""
    out: dict[str, Any] = {}
    seen: set[int] = set()
    for name in modules:
        mod = sys.modules.get(name)
        if mod is None:
            continue
        for attr, value in list(vars(mod).items()):
            where = f"{name}.{attr}"
            if where in REBOUND:
                continue
            out[where] = value
            if isinstance(value, type) and value.__module__ == name:
                _class(out, seen, where, value)
            else:
                _function(out, where, value)
    for cls in classes:
        _class(out, seen, f"{cls.__module__}.{cls.__qualname__}", cls)
    return out


def _class(out: dict[str, Any], seen: set[int], where: str, cls: type) -> None:
    if id(cls) in seen:
        return
    seen.add(id(cls))
    for attr, value in list(vars(cls).items()):
        if attr in ("__dict__", "__weakref__", "__doc__"):
            continue
        out[f"{where}.{attr}"] = value
        inner = getattr(value, "__func__", None) or getattr(value, "fget", None) or value
        _function(out, f"{where}.{attr}", inner)


def _function(out: dict[str, Any], where: str, value: Any) -> None:
    if type(value).__name__ != "function":
        return
    for part in _FUNCTION_PARTS:
        out[f"{where}.{part}"] = getattr(value, part, None)


def differences(before: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """Where `now` holds another object than `before`, or has an entry `before` lacks (or the
    other way round)."""
    changed = [k for k, v in before.items() if k not in now or now[k] is not v]
    added = [k for k in now if k not in before]
    return changed + added
