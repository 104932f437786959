"""The knockout check: with every Triton launch of forward skipped, the output must change.

A verdict of "correct" must mean the Triton kernels computed the output. Static rules and the
dispatch guard stop the common ways round that, but each can be dodged on its own: compute in
numpy, PyTorch under `torch._C._DisableTorchDispatch()`, the reference `Model` loaded by path, a
cache filled in an earlier call. All of them have one thing in common: the right answer arrives
whether or not the kernels run. So the candidate worker runs forward once more with every launch
replaced by a no-op and every fresh allocation (`torch.empty` and friends) filled with garbage, and
the trusted reference worker compares that output with the reference's like any trial. If it
still matches, the kernels were a decoy: `forbidden_construct` (`verdicts.DECOY_MESSAGE`).

A forward that raises, or returns garbage, under the knockout is what a real kernel does: the
check passes. The check runs in the candidate's process, so a candidate that detects the knockout
(by reading a kernel's result on the host before returning) could still dodge it; it catches
every decoy that does not go looking for the harness.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from kernelcraft.engine.watch.guard import library_impl
from kernelcraft.engine.watch.launches import LaunchRecorder, intercept_launches

# Allocations whose memory a kernel would fill: after each, the knockout writes garbage there.
_FRESH = frozenset(
    {"empty", "empty_like", "empty_strided", "empty_permuted", "new_empty", "new_empty_strided"}
)


def garbage_fill(t: torch.Tensor) -> None:
    """Overwrite a fresh tensor with values no correct result is made of."""
    if t.numel() == 0:
        return
    if t.is_floating_point() or t.is_complex():
        t.fill_(float("nan"))
    elif t.dtype == torch.bool:
        t.view(-1).copy_(torch.arange(t.numel(), device=t.device) % 2 == 0) if t.is_contiguous() else t.fill_(
            True
        )
    else:
        t.fill_(torch.iinfo(t.dtype).min + 7)


class _PoisonFresh(TorchDispatchMode):
    """Fills every tensor an `empty`-family op returns with garbage."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False  # no torch._disable_dynamo wrapper, whose first call imports dynamo (guard.py)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        impl = library_impl(func, args, kwargs or {})
        if impl is not None:  # a custom op's Python: its allocations are poisoned too
            with self:
                return impl(*args, **(kwargs or {}))
        out = func(*args, **(kwargs or {}))
        name = getattr(getattr(func, "overloadpacket", func), "__name__", "").split("::")[-1]
        if name in _FRESH and isinstance(out, torch.Tensor):
            garbage_fill(out)  # this mode is off inside its own handler: no recursion
        return out


@contextmanager
def knocked_out() -> Iterator[LaunchRecorder]:
    """Inside: Triton launches do nothing (and are counted), fresh allocations hold garbage."""
    with torch.no_grad(), intercept_launches(execute=False) as rec, _PoisonFresh():
        yield rec


def run_knocked_out(model: Any, inputs: list[Any]) -> tuple[Any | None, int, str | None]:
    """Forward under the knockout: (output or None, launches skipped, the error it raised)."""
    try:
        with knocked_out() as rec:
            out = model(*inputs)
    except Exception as e:  # noqa: BLE001 - a forward that breaks without its kernels is expected
        return None, 0, f"{type(e).__name__}: {e}"
    return out, rec.count, None
