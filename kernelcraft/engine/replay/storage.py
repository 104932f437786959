"""What the replay (`replay.py`) knows of a tensor's storage: which storage it is (`key`), how far a
view reaches into it (`extent`), all of its bytes (`whole`), cheap evidence that those bytes did
not change (`fingerprint`), and the tensors a model holds (`reachable`). Written by the evaluation engine only.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import torch


def key(t: torch.Tensor) -> tuple[str, int]:
    return str(t.device), t.untyped_storage().data_ptr()


def extent(t: torch.Tensor) -> int:
    """Bytes of the storage the view reaches, from its start."""
    if t.numel() == 0:
        return 0
    last = int(t.storage_offset()) + sum((s - 1) * st for s, st in zip(t.shape, t.stride(), strict=True))
    return int((last + 1) * t.element_size())


def whole(t: torch.Tensor) -> torch.Tensor:
    """The whole storage under `t`, as bytes."""
    storage = t.untyped_storage()
    return torch.empty(0, dtype=torch.uint8, device=t.device).set_(storage, 0, (storage.nbytes(),), (1,))


SUM_CHUNK = 1 << 24  # elements summed at once: torch.sum(dtype=int64) widens its input first


def fingerprint(t: torch.Tensor) -> tuple[int, int, bytes]:
    """Cheap evidence that a (large) parameter's bytes did not change, without a full-size copy:
    the sums of its bytes and of its 32-bit words, and a strided sample of its bytes. The sums go
    chunk by chunk: summed whole, the int64 widening of a 256 MB buffer took 2 GB and ran a
    candidate within its memory limit out of memory in the harness's own check."""
    data = whole(t)
    words = data.view(torch.int32) if data.numel() % 4 == 0 else data
    step = max(1, data.numel() // 4096)
    return _sum(data), _sum(words), data[::step].cpu().numpy().tobytes()


def _sum(flat: torch.Tensor) -> int:
    return sum(
        int(torch.sum(flat[i : i + SUM_CHUNK], dtype=torch.int64)) for i in range(0, flat.numel(), SUM_CHUNK)
    )


def reachable(roots: list[Any], depth: int = 4) -> Iterator[torch.Tensor]:
    """Tensors held by `roots`: attributes, containers, submodules, class attributes."""
    seen: set[int] = set()
    stack = [(r, 0) for r in roots]
    while stack:
        obj, d = stack.pop()
        if id(obj) in seen or d > depth:
            continue
        seen.add(id(obj))
        if isinstance(obj, torch.Tensor):
            yield obj
            continue
        if isinstance(obj, dict):
            children: Iterable[Any] = list(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset)):
            children = list(obj)
        elif isinstance(obj, torch.nn.Module):
            children = [*vars(obj).values(), *vars(type(obj)).values()]
        else:
            children = []
        stack.extend((c, d + 1) for c in children)
