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

There `torch.cuda`'s device facts (`get_device_properties`, `torch.cuda.device(...)`, ...:
`FAKED_TORCH_CUDA`) and Triton's `driver.active` (the tutorials' `get_active_torch_device()`,
`utils.get_device_properties`) answer as one H200 does, and are put back after each forward.

`compile`'s discovery runs in `gpu_way("meta")`: the same facts, on meta tensors.

Limits: `torch.cuda.is_available()` stays False, and streams are not faked (in `compile`'s
discovery a forward that needs a CUDA stream fails, and falls back to the meta tensors' own way,
with a note). Runs in the candidate worker only.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
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


H200 = {
    "name": "NVIDIA H200 (kernelcraft's stand-in on a CPU machine)",
    "major": 9,
    "minor": 0,
    "multi_processor_count": 132,
    "total_memory": 150_109_880_320,
    "warp_size": 32,
    "max_threads_per_multi_processor": 2048,
    "max_threads_per_block": 1024,
    "regs_per_multiprocessor": 65536,
    "shared_memory_per_block": 49152,
    "shared_memory_per_block_optin": 232448,
    "shared_memory_per_multiprocessor": 233472,
    "L2_cache_size": 52_428_800,
    "is_integrated": 0,
    "is_multi_gpu_board": 0,
}
"""What `torch.cuda.get_device_properties` says on the CPU under `CandidateWay`: the H200 the
project measures on, whose sm_90a is the GPU check's default target."""

TRITON_H200 = {
    "max_shared_mem": 232448,
    "max_num_regs": 65536,
    "multiprocessor_count": 132,
    "warpSize": 32,
    "sm_clock_rate": 1_980_000,
    "mem_clock_rate": 2_619_000,
    "mem_bus_width": 5120,
}
"""The same H200 as Triton's driver describes it (`driver.active.utils.get_device_properties`)."""

FAKED_TORCH_CUDA = (
    "get_device_properties",
    "get_device_name",
    "get_device_capability",
    "current_device",
    "set_device",
    "device",
    "synchronize",
)
"""The `torch.cuda` functions `CandidateWay` answers on the CPU (`source/devices.no_cpu_way`)."""


class _NoDevice:
    """`torch.cuda.device(...)`: on the CPU there is one device and nothing to switch."""

    def __init__(self, device: Any = None) -> None:
        self.idx = 0

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


class _Driver:
    """Triton's `driver.active` on the CPU, where Triton has no driver ("0 active drivers"): the
    tutorials' `DEVICE = driver.active.get_active_torch_device()` and device properties."""

    def __init__(self, torch: Any) -> None:
        from types import SimpleNamespace

        self.torch = torch
        self.utils = SimpleNamespace(get_device_properties=lambda device=0: dict(TRITON_H200))

    def get_active_torch_device(self) -> Any:
        return self.torch.device("cuda", 0)

    def get_current_device(self) -> int:
        return 0

    def set_current_device(self, device: Any) -> None:
        return None

    def get_current_stream(self, device: Any = None) -> int:
        return 0

    def get_current_target(self) -> Any:
        from triton.backends.compiler import GPUTarget

        return GPUTarget("cuda", 90, 32)


@contextmanager
def gpu_way(real: str = "cpu", only_under: Path | None = None) -> Iterator[None]:
    """`looks_cuda(real, only_under)`, `torch.cuda`'s device facts (`FAKED_TORCH_CUDA`) and Triton's
    active driver answered as on one H200, put back as the block ends."""
    import torch
    from triton.runtime import driver

    props = SimpleNamespace(**H200)
    answers: dict[str, Any] = {
        "get_device_properties": lambda device=None: props,
        "get_device_name": lambda device=None: H200["name"],
        "get_device_capability": lambda device=None: (H200["major"], H200["minor"]),
        "current_device": lambda: 0,
        "set_device": lambda device: None,
        "device": _NoDevice,
        "synchronize": lambda device=None: None,
    }
    saved = {name: getattr(torch.cuda, name) for name in FAKED_TORCH_CUDA}
    active = driver._active
    try:
        for name in FAKED_TORCH_CUDA:
            setattr(torch.cuda, name, answers[name])
        driver.set_active(_Driver(torch))
        with looks_cuda(real, only_under):
            yield
    finally:
        for name, value in saved.items():
            setattr(torch.cuda, name, value)
        driver._active = active


class CandidateWay:
    """The candidate's import, build and every forward inside `gpu_way("cpu", workdir)` when its host
    code has no CPU way (`source/devices.no_cpu_way`) and it runs on the CPU (the interpreter's
    trials, or `compile`'s load before its meta discovery); nothing otherwise. The way is entered
    and left within each forward, so none of it outlives one."""

    def __init__(self, source: str, workdir: Path, on_cpu: bool) -> None:
        from kernelcraft.engine.source.devices import no_cpu_way

        self.workdir = workdir
        self.on = bool(on_cpu and no_cpu_way(source))
        self._way: Any = None

    def __enter__(self) -> None:
        if self.on:
            self._way = gpu_way("cpu", self.workdir)
            self._way.__enter__()

    def __exit__(self, *exc: Any) -> None:
        if self._way is not None:
            self._way, way = None, self._way
            way.__exit__(*exc)

    def wrap(self, model: Any) -> Any:
        """`model`, its `forward` run inside the way (when on)."""
        if not self.on:
            return model
        forward, workdir = model.forward, self.workdir

        def as_cuda(*args: Any, **kwargs: Any) -> Any:
            with gpu_way("cpu", workdir):
                return forward(*args, **kwargs)

        model.forward = as_cuda
        return model


def _on(t: Any, real: str, torch: Any) -> bool:
    with torch._C.DisableTorchFunction():
        return bool(t.device.type == real)
