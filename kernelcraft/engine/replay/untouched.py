"""The reference's own memory during the fresh-input replay (`fresh.py`), where it re-runs the
candidate's kernels in its own process.

Under Triton's interpreter a kernel's pointer is a raw address of the process running it, so a
kernel may read and write any memory there, not only its arguments. Computed before the re-run,
Model's answer for the fresh inputs lay in that memory, and a kernel that computed two rows of six
found the rest there by scanning below its input and passed (`fresh_reads_reference_memory.py`).
So on the CPU the reference computes its answer only after the kernels ran, from the fresh inputs
it kept aside, and first checks, by digest, that the kernels left those inputs and everything of
Model's alone (parameters, buffers, tensors held as attributes): a kernel that zeroed Model's
weights would otherwise make its answer the kernel's own. On a GPU the answer is computed first
and waits in host memory, which a kernel cannot reach (the order as it was).

What is left: a kernel with a raw write can still change other state of the process (torch's own,
Python's objects) that the answer or the comparison reads; the reference is not kept afterwards.
Written by the evaluation engine only; runs in the reference worker.
"""

from __future__ import annotations

import hashlib
from typing import Any

import torch


class Watch:
    """Digests of Model's tensors and the fresh inputs, taken before the re-run."""

    def __init__(self, model: Any, inputs: Any) -> None:
        self.named = _tensors(model, inputs)
        self.digests = [_digest(t) for _name, t in self.named]

    def changed(self) -> str | None:
        """Why the re-run's kernels are refused (what of the reference's they wrote), or None."""
        for (name, t), before in zip(self.named, self.digests, strict=True):
            if _digest(t) != before:
                return (
                    f"forward's recorded kernels, re-run on fresh inputs in the reference worker, wrote into "
                    f"{name}, memory they were not given: a kernel may write only through its own arguments"
                )
        return None


def answer(worker: Any, inputs: Any) -> Any:
    """Model's outputs, on the host, for clones of `inputs` (a `ReferenceWorker`'s)."""
    with torch.no_grad():
        out = worker.model(*[worker._map(x, lambda t: t.clone()) for x in inputs])
    worker.sync()
    return worker._map(out, lambda t: t.detach().to("cpu", copy=True))


def _tensors(model: Any, inputs: Any) -> list[tuple[str, torch.Tensor]]:
    out: list[tuple[str, torch.Tensor]] = []
    seen: set[int] = set()

    def add(name: str, t: Any) -> None:
        if isinstance(t, torch.Tensor) and id(t) not in seen:
            seen.add(id(t))
            out.append((name, t))

    for i, x in enumerate(_leaves(inputs)):
        add(f"the fresh input {i}", x)
    if isinstance(model, torch.nn.Module):
        for prefix, module in model.named_modules():
            for attr, value in vars(module).items():
                for key, t in value.items() if isinstance(value, dict) else [(attr, value)]:
                    add(f"Model's {'.'.join(p for p in (prefix, str(key)) if p)}", t)
    return out


def _leaves(obj: Any) -> list[Any]:
    if isinstance(obj, (list, tuple)):
        return [x for item in obj for x in _leaves(item)]
    if isinstance(obj, dict):
        return [x for item in obj.values() for x in _leaves(item)]
    return [obj]


def _digest(t: torch.Tensor) -> bytes:
    data = t.detach().to("cpu").contiguous().reshape(-1)
    raw = data.view(torch.uint8) if data.numel() and data.dtype != torch.uint8 else data
    return hashlib.blake2b(raw.numpy().tobytes(), digest_size=16).digest() + str(t.dtype).encode()
