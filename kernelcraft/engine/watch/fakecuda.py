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

Limits: `torch.cuda.is_available()` and other `torch.cuda` calls are not torch functions and are
not changed (a forward that needs a CUDA stream or device properties fails here, and discovery
falls back to the meta tensors' own way, with a note). Runs in the candidate worker only.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_CUDA_GETTERS = {"device": "cuda", "is_cuda": True, "is_meta": False, "is_cpu": False}


def _cuda_to_meta(value: Any, torch: Any) -> Any:
    """`value` (a device argument) with a CUDA device replaced by the meta device."""
    if isinstance(value, str | torch.device):
        try:
            if torch.device(value).type == "cuda":
                return torch.device("meta")
        except (RuntimeError, TypeError):
            return value
    return value


@contextmanager
def looks_cuda() -> Iterator[None]:
    """Within the block, meta tensors report `cuda:0` and CUDA allocations are meta ones."""
    import torch
    from torch.overrides import TorchFunctionMode

    cuda = torch.device("cuda", 0)

    class LooksCuda(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = dict(kwargs or {})
            name = getattr(func, "__name__", "")
            if name == "__get__" and args:
                prop = getattr(getattr(func, "__self__", None), "__name__", "")
                if prop in _CUDA_GETTERS and isinstance(args[0], torch.Tensor):
                    if _on_meta(args[0], torch):
                        return cuda if prop == "device" else _CUDA_GETTERS[prop]
            if name == "get_device" and args and isinstance(args[0], torch.Tensor):
                if _on_meta(args[0], torch):
                    return 0
            if name == "cuda" and args and isinstance(args[0], torch.Tensor):
                return args[0].to("meta")
            if "device" in kwargs:
                kwargs["device"] = _cuda_to_meta(kwargs["device"], torch)
            if name == "to":
                args = tuple(_cuda_to_meta(a, torch) for a in args)
            return func(*args, **kwargs)

    with LooksCuda():
        yield


def _on_meta(t: Any, torch: Any) -> bool:
    with torch._C.DisableTorchFunction():
        return bool(t.is_meta)
