"""Meta tensors that say they are on a CUDA device, so that launch discovery takes the GPU's way.

`compile` finds a candidate's launches by running its forward on meta tensors (no memory, no
compute). A forward that asks where its tensors live (`if x.is_cuda:`, `x.device.type == "cuda"`)
would take the CPU's way there, and the kernels only the GPU's way launches would never be
compiled. Inside `looks_cuda()` every meta tensor answers `device` with `cuda:0`, `is_cuda` with
True and `is_meta`/`is_cpu` with False, and what the forward asks for on CUDA (`device="cuda"`,
`.cuda()`, `.to(x.device)`) is made on the meta device instead, so the GPU's way runs to the
launches, which `intercept_launches(execute=False)` records without running them.

Why not torch's `FakeTensorMode` with a CUDA fake device: on a CPU-only torch (2.13) its CUDA
tensors reach a device guard in composite ops (`linear`) and the process aborts ("PyTorch is not
linked with support for cuda devices"). Tensors here stay plain meta tensors; only what Python
reads of their device changes, through a `TorchFunctionMode` (property reads go through it).

The CPU trials of a candidate whose host code has no CPU way (`assert x.is_cuda`, `.cuda()`,
`device="cuda"`: `source/devices.no_cpu_way`) run the same way on CPU tensors
(`CandidateWay`): they say `cuda:0` to the candidate's own code only, and what it asks for on
CUDA is made on the CPU. Before, such an honest GPU kernel failed every CPU verdict with its own
assertion.

Limits: `torch.cuda.is_available()` and other `torch.cuda` calls are not torch functions and are
not changed (a forward that needs a CUDA stream or device properties fails here, and discovery
falls back to the meta tensors' own way, with a note). Runs in the candidate worker only.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

_CUDA_GETTERS = {"device": "cuda", "is_cuda": True, "is_meta": False, "is_cpu": False}


def _cuda_to(value: Any, real: Any, torch: Any) -> Any:
    """`value` (a device argument) with a CUDA device replaced by `real`."""
    if isinstance(value, str | torch.device):
        try:
            if torch.device(value).type == "cuda":
                return real
        except (RuntimeError, TypeError):
            return value
    return value


@contextmanager
def looks_cuda(real: str = "meta", only_under: Path | None = None) -> Iterator[None]:
    """Within the block, tensors on `real` report `cuda:0` and CUDA allocations are made on `real`.

    `only_under`: tensors say so only to code in files under that folder (the candidate's), so
    that the harness's own reads inside forward (the replay's tape, the launch records) see
    where each tensor is."""
    import torch
    from torch.overrides import TorchFunctionMode

    cuda, device = torch.device("cuda", 0), torch.device(real)
    folder = str(only_under) + os.sep if only_under is not None else None

    class LooksCuda(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = dict(kwargs or {})
            name = getattr(func, "__name__", "")
            asked = folder is None or sys._getframe(1).f_code.co_filename.startswith(folder)
            if asked and args and isinstance(args[0], torch.Tensor) and _on(args[0], real, torch):
                if name == "__get__":
                    prop = getattr(getattr(func, "__self__", None), "__name__", "")
                    if prop in _CUDA_GETTERS:
                        return cuda if prop == "device" else _CUDA_GETTERS[prop]
                if name == "get_device":
                    return 0
            if name == "cuda" and args and isinstance(args[0], torch.Tensor):
                return args[0].to(device)
            if "device" in kwargs:
                kwargs["device"] = _cuda_to(kwargs["device"], device, torch)
            if name == "to":
                args = tuple(_cuda_to(a, device, torch) for a in args)
            return func(*args, **kwargs)

    with LooksCuda():
        yield


class CandidateWay:
    """The candidate's import, build and every forward inside `looks_cuda("cpu", workdir)` when
    its host code has no CPU way (`source/devices.no_cpu_way`) and it runs on the CPU (the
    interpreter's trials, or `compile`'s load before its meta discovery);
    nothing otherwise. The mode is entered and left within each forward, so none outlives it."""

    def __init__(self, source: str, workdir: Path, on_cpu: bool) -> None:
        from kernelcraft.engine.source.devices import no_cpu_way

        self.workdir = workdir
        self.on = bool(on_cpu and no_cpu_way(source))
        self._mode: Any = None

    def __enter__(self) -> None:
        if self.on:
            self._mode = looks_cuda("cpu", self.workdir)
            self._mode.__enter__()

    def __exit__(self, *exc: Any) -> None:
        if self._mode is not None:
            self._mode, mode = None, self._mode
            mode.__exit__(*exc)

    def wrap(self, model: Any) -> Any:
        """`model`, its `forward` run inside the mode (when on)."""
        if not self.on:
            return model
        forward, workdir = model.forward, self.workdir

        def as_cuda(*args: Any, **kwargs: Any) -> Any:
            with looks_cuda("cpu", workdir):
                return forward(*args, **kwargs)

        model.forward = as_cuda
        return model


def _on(t: Any, real: str, torch: Any) -> bool:
    with torch._C.DisableTorchFunction():
        return bool(t.device.type == real)
