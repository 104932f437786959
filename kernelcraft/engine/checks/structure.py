"""What a candidate hands back, held to what the reference returns, before any value is compared.

Runs in the trusted reference worker on what `wire/tensors.unpack` rebuilt (plain tensors,
tuples, lists, dicts with string keys and plain numbers: nothing that runs code). The candidate's
outputs must have the reference's shape as a structure: a tensor where the reference has a tensor,
a sequence of as many items where it has a sequence (a tuple and a list are the same here), a dict
with the same keys. Zero outputs where the reference has some is a wrong answer, never "nothing
compared, so nothing differs". Shapes and dtypes are then `compare.compare_one`'s.
"""

from __future__ import annotations

from typing import Any

import torch

MAX_DEPTH = 16


def _kind(obj: Any) -> str:
    if isinstance(obj, torch.Tensor):
        return "a tensor"
    if isinstance(obj, (tuple, list)):
        return f"a sequence of {len(obj)}"
    if isinstance(obj, dict):
        return f"a dict with keys {sorted(obj)[:8]}"
    return f"a {type(obj).__name__}"


def mismatch(ref: Any, out: Any, where: str = "the output", depth: int = 0) -> str | None:
    """Why `out` is not shaped like `ref` as a structure (None when it is)."""
    if depth > MAX_DEPTH:
        return f"{where} is nested deeper than {MAX_DEPTH} levels"
    if isinstance(ref, (tuple, list)):
        if not isinstance(out, (tuple, list)) or len(out) != len(ref):
            return f"{where} is {_kind(out)} where the reference returns {_kind(ref)}"
        for i, (r, o) in enumerate(zip(ref, out, strict=True)):
            found = mismatch(r, o, f"{where}[{i}]", depth + 1)
            if found is not None:
                return found
        return None
    if isinstance(ref, dict):
        if not isinstance(out, dict) or set(out) != set(ref):
            return f"{where} is {_kind(out)} where the reference returns {_kind(ref)}"
        for k in sorted(ref):
            found = mismatch(ref[k], out[k], f"{where}[{k!r}]", depth + 1)
            if found is not None:
                return found
        return None
    if isinstance(ref, torch.Tensor) and not isinstance(out, torch.Tensor):
        return f"{where} is {_kind(out)} where the reference returns a tensor"
    if not isinstance(ref, torch.Tensor) and isinstance(out, (torch.Tensor, tuple, list, dict)):
        return f"{where} is {_kind(out)} where the reference returns {ref!r}"[:300]
    return None
