"""Measuring a task without allocating it, in the reference worker (trusted; the task is loaded).

`measure(task, interpret)` builds the trial's inputs (`get_cpu_inputs()` in the interpreter when
the task has it, else `get_inputs()`) and `Model(*get_init_inputs())` under `torch.device("meta")`
(shapes and dtypes, no memory, no compute) and runs forward there for the outputs' sizes (when an
op has no meta kernel, the outputs are left unmeasured and `memory.py` takes them as large as the
inputs). Forward on meta runs torch's Python decompositions, whose first call imports torch._dynamo
(~1 s, 3.2 s without bytecode on the H200): where it is not imported yet (a one-off command's
workers) and the task is small (`QUICK_BELOW_BYTES`), its outputs are left unmeasured instead, as
a job alone on the device loses nothing by it. `device_memory(device)` is what the device has free
and in all. `shrink_for_interpreter` loads the task at small sizes (`shrink.py`) when the
interpreter would take too long at its own.

Runs in the worker process only.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from kernelcraft.engine.measure.rotation import nbytes
from kernelcraft.engine.worker import shrink

QUICK_BELOW_BYTES = 256 << 20
"""A task whose inputs and parameters are under this (and, in the interpreter, under
`shrink.SHRINK_ABOVE_ELEMENTS` elements) is measured without forward where that would import
torch._dynamo (`measure(quick=)`)."""


def _tensors(obj: Any, torch: Any) -> list[Any]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for x in obj for t in _tensors(x, torch)]
    if isinstance(obj, dict):
        return [t for x in obj.values() for t in _tensors(x, torch)]
    return []


def shape_text(ts: list[Any]) -> str:
    return ", ".join(f"{str(t.dtype).removeprefix('torch.')}{list(t.shape)}" for t in ts)


def measure(task: Any, interpret: bool, quick: bool = False) -> dict[str, Any]:
    """The task's sizes on the meta device: bytes of inputs, params (and buffers) and outputs,
    the element count of inputs and params (the interpreter's work), the inputs' shapes.
    `quick`: a small task's outputs are not measured where that would import torch._dynamo."""
    import sys

    import torch

    torch.manual_seed(0)
    with torch.device("meta"):
        fn = getattr(task, "get_cpu_inputs", None) if interpret else None
        inputs = list((fn or task.get_inputs)())
        model = task.Model(*task.get_init_inputs())
    ins = _tensors(inputs, torch)
    params = [*model.parameters(), *model.buffers()] if isinstance(model, torch.nn.Module) else []
    elements = sum(t.numel() for t in ins) + sum(t.numel() for t in params)
    # (In the interpreter a task over SHRINK_ABOVE_ELEMENTS is shrunk, which needs its outputs.)
    shrinks = interpret and elements > shrink.SHRINK_ABOVE_ELEMENTS
    small = nbytes(ins) + nbytes(params) < QUICK_BELOW_BYTES and not shrinks
    outputs_measured, out_bytes = False, nbytes(ins)
    if not (quick and small and "torch._dynamo" not in sys.modules):
        try:
            with torch.no_grad():
                outs = _tensors(model(*inputs), torch)
            outputs_measured, out_bytes = True, nbytes(outs)
        except Exception:
            pass
    return {
        "inputs": nbytes(ins),
        "params": nbytes(params),
        "outputs": out_bytes,
        "outputs_measured": outputs_measured,
        "elements": elements,
        "shapes": shape_text(ins)[:500],
    }


def device_memory(device: str) -> tuple[int, int]:
    """(free, total) bytes of the device: the GPU's, or the machine's RAM (MemAvailable)."""
    if device.startswith("cuda"):
        import torch

        free, total = torch.cuda.mem_get_info()
        return int(free), int(total)
    try:
        text = Path("/proc/meminfo").read_text()
    except OSError:
        return 0, 0
    kib = {m[1]: int(m[2]) for m in re.finditer(r"^(\w+):\s+(\d+) kB", text, re.MULTILINE)}
    return kib.get("MemAvailable", 0) * 1024, kib.get("MemTotal", 0) * 1024


def shrink_for_interpreter(
    source: str, task: Any, sizes: dict[str, Any], load: Any
) -> tuple[Any, dict[str, Any], str | None, dict[str, list[int]], str | None]:
    """The task at sizes the interpreter runs in seconds, when it has no get_cpu_inputs and its
    work is over `shrink.SHRINK_ABOVE_ELEMENTS`: each smaller `shrink.LIMITS` in turn until the
    work is under it, or until forward stops running on meta at the smaller sizes (a convolution
    whose kernel outgrew its image). A limit whose rewrite would break the task's structure
    (`shrink.structure_broken`) is skipped. `load(source, tag)` imports a source. Returns (task,
    sizes, the shrunk source or None, {constant: [old, new]}, why it was not shrunk or None)."""
    if hasattr(task, "get_cpu_inputs") or sizes["elements"] <= shrink.SHRINK_ABOVE_ELEMENTS:
        return task, sizes, None, {}, None
    best: tuple[Any, dict[str, Any], str | None, dict[str, list[int]]] = (task, sizes, None, {})
    broken: list[str] = []
    for limit in shrink.LIMITS:
        small, changes, breaks = shrink.shrunk_source(source, limit)
        broken = broken or breaks
        if not changes:  # every size within this limit (level 2's 128s under 256), or its
            continue  # structure broken at it: try smaller
        try:
            small_task = load(small, f"shrunk{limit}")
            small_sizes = measure(small_task, interpret=True)
        except Exception:  # the task's own checks refuse these sizes (channels a group count divides)
            break
        if sizes["outputs_measured"] and not small_sizes["outputs_measured"]:
            break  # forward no longer runs at these sizes (a kernel larger than the image, ...)
        if small_sizes["elements"] < best[1]["elements"]:
            best = (small_task, small_sizes, small, {k: [o, n] for k, (o, n) in changes.items()})
        if small_sizes["elements"] <= shrink.SHRINK_ABOVE_ELEMENTS:
            break
    why = None
    if best[2] is None and broken:
        why = "shrinking its sizes would break its structure: " + "; ".join(broken[:4])
    return (*best, why)
