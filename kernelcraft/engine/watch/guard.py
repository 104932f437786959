"""Dynamic anti-cheat checks, installed in the candidate worker around `ModelNew.forward`.

- Launches are counted with `kernelcraft.engine.watch.launches.intercept_launches(execute=True)` (the
  worker wraps forward in it); zero launches means `no_triton_launch`.
- `OpRecorder` is a `TorchDispatchMode` that records every aten op forward runs outside a Triton
  launch; anything but allocation, views, layout copies and fills is `pytorch_fallback` unless the
  caller allowed it. Ops that Triton's own code issues inside a launch are let through (the
  interpreter copies tensors to and from the CPU), by the identity of the code that issued them
  (`launches.in_triton_launch`), never by a flag the candidate can set.
- `Integrity` captures the functions and constants (`ALLOWED_OPS`, ...) the harness relies on before
  the candidate is imported and reports any that were replaced afterwards (`forbidden_construct`).

These run in the candidate's own process, so a determined candidate can defeat them; they catch
what the static checks miss. The verdict on the numbers never depends on them: outputs are
compared in the trusted reference worker.

Written by the evaluation engine only.
"""

from __future__ import annotations

import builtins
import importlib
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from kernelcraft.engine.watch import launches, members, trusted
from kernelcraft.engine.watch.launches import in_triton_launch

# aten overload packets (without the "aten::" prefix) a candidate's forward may use freely.
ALLOWED_OPS = frozenset(
    """
    empty empty_like empty_strided empty_permuted new_empty new_empty_strided zeros zeros_like new_zeros
    ones ones_like new_ones full full_like new_full fill fill_ zero_ arange scalar_tensor
    view _unsafe_view view_as reshape _reshape_alias permute transpose transpose_ t t_ contiguous clone
    copy_ copy _to_copy to as_strided as_strided_ expand expand_as squeeze squeeze_ unsqueeze unsqueeze_
    detach detach_ alias lift_fresh lift_fresh_copy slice select narrow split split_with_sizes chunk
    unbind flatten unflatten movedim swapaxes resize_ set_ _local_scalar_dense is_nonzero
    sym_size sym_stride sym_numel sym_storage_offset record_stream
    """.split()
)


def op_name(func: Any) -> str:
    """'add' for aten.add.Tensor; 'mylib::clone' for an op of any other namespace. The allowed
    ops are ATen's, by the operator's namespace: a custom op (torch.library) named like an
    allowed one is PyTorch compute like any other."""
    packet = getattr(func, "overloadpacket", func)
    name = str(getattr(packet, "__name__", packet)).split("::")[-1]
    namespace = getattr(func, "namespace", None)
    return name if namespace == "aten" else f"{namespace}::{name}"


def library_impl(func: Any, args: Any, kwargs: Any) -> Callable[..., Any] | None:
    """The Python function a `torch.library.custom_op` (or `triton_op`) runs for these arguments,
    or None (an ATen op, or an op with no Python implementation known to `torch.library`).

    A host wrapper registered as a custom op (the way PyTorch asks Triton kernels to be written
    for `torch.compile`) reaches a dispatch mode as one opaque op, which the recorder counted as
    PyTorch compute and the knockout could not poison inside. Its implementation is the
    candidate's own Python: the modes run it inside themselves (as torch's own
    `FunctionalTensorMode` decomposes a `triton_op`), so every op and launch in it is seen and
    judged like forward's own."""
    if getattr(func, "namespace", "aten") in ("aten", "prims"):
        return None
    from torch._library.custom_ops import OPDEFS

    opdef = OPDEFS.get(getattr(getattr(func, "_schema", None), "name", ""))
    if opdef is None:
        return None
    tensors = [a for a in [*args, *kwargs.values()] if isinstance(a, torch.Tensor)]
    fns = opdef._backend_fns
    fn = fns.get(tensors[0].device.type if tensors else None) or fns.get(None)
    return getattr(fn, "__wrapped__", fn)  # (past torch._disable_dynamo, which imports dynamo)


class OpRecorder(TorchDispatchMode):
    """Records compute ops run outside Triton launches."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # Else TorchDispatchMode wraps __torch_dispatch__ in torch._disable_dynamo, whose first
        # call imports torch._dynamo: 1-3 s of a one-off command's first verdict.
        return False

    def __init__(self, allowed: frozenset[str], tape: Any = None) -> None:
        super().__init__()
        self.allowed = ALLOWED_OPS | allowed
        self.fallbacks: list[str] = []
        self.tape = tape
        """A `replay.Tape` to write each op outside a launch to, or None."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        if in_triton_launch():
            return func(*args, **kwargs)
        impl = library_impl(func, args, kwargs)
        if impl is not None:  # the candidate's own Python, recorded op by op
            with self:
                return impl(*args, **kwargs)
        name = op_name(func)
        if name not in self.allowed and name not in self.fallbacks:
            self.fallbacks.append(name)
        if self.tape is None:
            return func(*args, **kwargs)
        return self.tape.op(func, name, args, kwargs, lambda: func(*args, **kwargs))


def _watched() -> dict[str, Callable[[], Any]]:
    """Functions the harness relies on, each read fresh by a lambda at check time."""
    import triton
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    from kernelcraft.engine.watch import records, tf32, trusted
    from kernelcraft.engine.wire import channel, tensors

    watched: dict[str, Callable[[], Any]] = {
        "torch.allclose": lambda: torch.allclose,
        "torch.isclose": lambda: torch.isclose,
        "torch.equal": lambda: torch.equal,
        "torch.testing.assert_close": lambda: torch.testing.assert_close,
        "torch.manual_seed": lambda: torch.manual_seed,
        "torch.random.manual_seed": lambda: torch.random.manual_seed,
        "torch.rand": lambda: torch.rand,
        "torch.randn": lambda: torch.randn,
        "torch.randint": lambda: torch.randint,
        "torch.empty": lambda: torch.empty,
        "torch.empty_like": lambda: torch.empty_like,
        "torch.Tensor.clone": lambda: torch.Tensor.clone,
        "torch.Tensor.copy_": lambda: torch.Tensor.copy_,
        "torch.Tensor.contiguous": lambda: torch.Tensor.contiguous,
        "torch.Tensor.fill_": lambda: torch.Tensor.fill_,
        "torch.Tensor.__eq__": lambda: torch.Tensor.__eq__,
        "torch.nn.Module.__call__": lambda: torch.nn.Module.__call__,
        "torch.nn.Module._call_impl": lambda: torch.nn.Module._call_impl,
        "torch.cuda.synchronize": lambda: torch.cuda.synchronize,
        "torch.cuda.Event": lambda: torch.cuda.Event,
        "torch.cuda.Event.record": lambda: torch.cuda.Event.record,
        "torch.cuda.Event.elapsed_time": lambda: torch.cuda.Event.elapsed_time,
        "torch.utils._python_dispatch.TorchDispatchMode": lambda: TorchDispatchMode,
        "TorchDispatchMode.__torch_dispatch__": lambda: OpRecorder.__torch_dispatch__,
        "triton.jit": lambda: triton.jit,
        "JITFunction.run": lambda: JITFunction.run,
        "InterpretedFunction.run": lambda: InterpretedFunction.run,
        "time.perf_counter": lambda: time.perf_counter,
        "time.time": lambda: time.time,
        "json.dumps": lambda: json.dumps,
        "os._exit": lambda: os._exit,
        "socket.socket.sendall": lambda: socket.socket.sendall,
        "builtins.isinstance": lambda: builtins.isinstance,
        "builtins.type": lambda: builtins.type,
        "threading.active_count": lambda: threading.active_count,
        "channel.send_frame": lambda: channel.send_frame,
        "tensors.pack": lambda: tensors.pack,
        "launches.in_triton_launch": lambda: launches.in_triton_launch,
        "launches.intercept_launches": lambda: launches.intercept_launches,
        "trusted.table": lambda: trusted.table,
        "records.make_record": lambda: records.make_record,
    }
    if tf32.installed()[1] is not None:  # the interpreter's TF32 rounding (installed first)
        watched["InterpreterBuilder.create_dot"] = lambda: tf32.installed()[0]
        watched["tf32: the original create_dot"] = lambda: tf32.installed()[1]
    for name in HARNESS_MODULES:
        mod = sys.modules.get(name)
        if mod is None:
            continue
        for attr, value in list(vars(mod).items()):
            own_function = callable(value) and getattr(value, "__module__", None) == name
            if own_function or _is_constant(attr, value):
                watched[f"{name}.{attr}"] = lambda m=mod, a=attr: getattr(m, a, None)  # type: ignore[misc]
    return watched


def _room_modules(room: str) -> tuple[str, ...]:
    """Every module of an engine room, found by listing its folder (as the worker installed it,
    before any candidate runs): a module added to the room is watched without being named."""
    folder = Path(__file__).resolve().parent.parent / room
    return tuple(
        sorted(f"kernelcraft.engine.{room}.{p.stem}" for p in folder.glob("*.py") if p.stem != "__init__")
    )


# Harness modules whose functions and constants a candidate must leave alone. Constants count:
# rebinding `guard.ALLOWED_OPS` from an imported helper module would widen the fallback allow-list.
# The watch room (everything that watches the candidate in its own process) is taken whole, by
# listing: twice this session a new module of it went unwatched until a test caught it.
HARNESS_MODULES = (
    "kernelcraft.engine.worker.main",
    "kernelcraft.engine.worker.common",
    "kernelcraft.engine.worker.candidate",
    "kernelcraft.engine.worker.room",
    "kernelcraft.engine.wire.protocol",
    "kernelcraft.engine.wire.tensors",
    "kernelcraft.engine.wire.channel",
    "kernelcraft.engine.checks.compare",
    "kernelcraft.engine.checks.perturb",
    "kernelcraft.engine.replay.replay",
    "kernelcraft.engine.replay.storage",
    "kernelcraft.engine.replay.program",
    "kernelcraft.engine.replay.export",
    "kernelcraft.engine.replay.kernelsource",
    "kernelcraft.engine.replay.fresh",
    "kernelcraft.engine.replay.traced",
    "kernelcraft.engine.replay.descriptors",
    "kernelcraft.engine.measure.rotation",
    "kernelcraft.engine.measure.samples",
    "kernelcraft.engine.measure.audit",
    "kernelcraft.engine.measure.timing",
    "kernelcraft.engine.worker.freeze",
    "kernelcraft.engine.worker.stages",
    "kernelcraft.engine.wire.requests",
    "kernelcraft.engine.wire.answers",
    "kernelcraft.engine.wire.tagged",
    "kernelcraft.engine.wire.bounds",
) + _room_modules("watch")
_CONSTANT_TYPES = (str, bytes, int, float, bool, frozenset, tuple, type(None))


def _is_constant(attr: str, value: Any) -> bool:
    """An UPPERCASE module attribute holding an immutable value (the harness's settings)."""
    return attr.isupper() and isinstance(value, _CONSTANT_TYPES)


# The code and globals of the wrapper `torch._disable_dynamo(fn)` returns, taken when the harness
# is imported (before any candidate), without importing dynamo.
_DISABLE_DYNAMO = torch._disable_dynamo(lambda: None)
_DISABLE_DYNAMO_CODE, _DISABLE_DYNAMO_GLOBALS = _DISABLE_DYNAMO.__code__, _DISABLE_DYNAMO.__globals__


def dynamos_own_rewrap(now: Any, before: Any) -> bool:
    """True when `now` is exactly what importing torch._dynamo puts in `before`'s place
    (`torch.manual_seed = torch._disable_dynamo(torch.manual_seed)`, its only rewrap of what the
    harness watches): `_disable_dynamo`'s own wrapper code, with the globals of torch's own module
    as the harness found them (not whatever `sys.modules` names now), closed over `before`. A
    candidate may import dynamo (torch.compile, a custom op); a forged wrapper is a change. (What
    the wrapper runs can still be swapped through `before.__dynamo_disable`, its cache, as it could
    when dynamo was imported before the snapshot; nothing the candidate's process seeds decides a
    verdict: the reference makes the inputs and compares.)"""
    if "torch._dynamo" not in sys.modules or getattr(now, "__code__", None) is not _DISABLE_DYNAMO_CODE:
        return False
    if now.__globals__ is not _DISABLE_DYNAMO_GLOBALS or now.__closure__ is None:
        return False
    try:
        cells = dict(zip(now.__code__.co_freevars, (c.cell_contents for c in now.__closure__), strict=True))
    except ValueError:  # an empty cell, or cells that do not match the code
        return False
    return cells.get("fn") is before and cells.get("recursive") is True


class Integrity:
    """A snapshot of harness functions; `changed()` names those replaced since.

    torch._dynamo need not be imported first: its import (the candidate's, or a harness step's)
    rewraps torch.manual_seed, which `changed()` tells apart from a candidate's replacement."""

    def __init__(self) -> None:
        with OpRecorder(frozenset()):  # the dispatch-mode machinery, once, before the snapshot
            torch.ones(1).add(1)
        trusted.trust_triton()  # Triton's own code, known before the candidate can add to it
        for name in HARNESS_MODULES:  # all of them, before the snapshot (a candidate could else
            importlib.import_module(name)  # import one first and change it)
        self._getters = _watched()
        self._snapshot = {name: get() for name, get in self._getters.items()}
        self._classes = _watched_classes()
        self._members = members.snapshot(HARNESS_MODULES, self._classes)

    def changed(self) -> list[str]:
        """What the candidate replaced since the snapshot: a watched function, or any member of
        the harness's modules and classes (`members.py`). The worker binds this method before
        the candidate is imported, so a replaced `Integrity.changed` is reported, not run."""
        out = []
        for name, get in self._getters.items():
            try:
                now = get()
            except Exception:  # an attribute deleted by the candidate counts as a change
                now = None
            before = self._snapshot[name]
            if now is not before and not (name == "torch.manual_seed" and dynamos_own_rewrap(now, before)):
                out.append(name)
        out += members.differences(self._members, members.snapshot(HARNESS_MODULES, self._classes))
        return out


def _watched_classes() -> list[type]:
    """Classes of torch's and Triton's that the recorders and the launch counter work through:
    their members are watched as the harness's own are."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction, KernelInterface

    return [
        TorchDispatchMode,
        JITFunction,
        KernelInterface,
        InterpretedFunction,
        torch.Tensor,
        torch.nn.Module,
    ]


def recorder_intact(recorder: OpRecorder, built: dict[str, Any]) -> str | None:
    """Why the op recorder a forward ran under is not as the harness built it (None when it is):
    its class, and every attribute it held once built (`built`: `dict(vars(recorder))` then), by
    identity, with none added or removed."""
    if type(recorder) is not OpRecorder:
        return "the op recorder's class"
    state = vars(recorder)
    if set(state) != set(built) or any(state[k] is not v for k, v in built.items()):
        return "the op recorder's state (its allow-list, its record or its tape)"
    return None


def modes_left(recorder: OpRecorder | None, reads: Any = None) -> str | None:
    """What forward left active that would run its code when the harness touches a tensor after
    the recording (None when nothing): a torch function mode other than the harness's host-read
    tracer it ran under (`reads`, `replay/traced.py`; none for `None`), or a dispatch mode other
    than the recorder it ran under (none, for `None`). Called as forward returns, inside the region."""
    from torch.overrides import _get_current_function_mode_stack
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    functions = _get_current_function_mode_stack()
    if functions != ([reads] if reads is not None else []):
        return f"{len(functions) - (reads is not None)} torch function mode(s)"
    stack = _get_current_dispatch_mode_stack()
    if stack != ([recorder] if recorder is not None else []):
        return f"{len(stack)} dispatch mode(s) where only the harness's own should be"
    return None
