"""Outputs frozen where they are recorded: what forward hands back, made plain before the op
recorder and the launch counter close, so that nothing of the candidate's runs after them.

A value the harness reads after the recording (to pack, replay or compare it) could otherwise
run the candidate's code then: a list subclass whose `__iter__` computes the answer in PyTorch, a
dict whose keys hash by running code, a Tensor subclass whose `__torch_function__` fills itself
in when packed, an object whose `__class__` says it is a tensor. `freeze` accepts only the exact
types that run no Python of anyone's when read: `torch.Tensor` itself, `tuple`, `list`, `dict`
with `str` keys, and plain numbers, strings and None, judged by `type(x) is ...` (never
`isinstance`, which reads a forged `__class__`), and copies every container; anything else is
refused (`forbidden_construct`). Written by the evaluation engine only; runs in the candidate
worker.
"""

from __future__ import annotations

from typing import Any

import torch

from kernelcraft.engine.replay.traced import TracedFloat, TracedInt

MAX_DEPTH = 8
MAX_ITEMS = 4096
PLAIN = (int, float, bool, str, type(None))


class Unfrozen(Exception):
    """forward handed back something that is not plain data."""


def freeze(obj: Any, where: str = "forward's output") -> Any:
    """`obj` rebuilt from exact tensors, tuples, lists, dicts and plain values; `Unfrozen` when it
    holds anything else (or nests deeper than `MAX_DEPTH`, or holds more than `MAX_ITEMS`)."""
    count = [0]
    return _freeze(obj, where, 0, count)


def _freeze(obj: Any, where: str, depth: int, count: list[int]) -> Any:
    count[0] += 1
    if count[0] > MAX_ITEMS or depth > MAX_DEPTH:
        raise Unfrozen(f"{where} holds more than {MAX_ITEMS} values or nests deeper than {MAX_DEPTH}")
    kind = type(obj)
    if kind is torch.Tensor:
        return obj
    if kind in PLAIN:
        return obj
    if kind is TracedInt:  # a number read back under the recorder (`replay/traced.py`): ours
        return int.__int__(obj)
    if kind is TracedFloat:
        return float.__float__(obj)
    if kind is tuple or kind is list:
        items = [_freeze(x, f"{where}[{i}]", depth + 1, count) for i, x in enumerate(obj)]
        return tuple(items) if kind is tuple else items
    if kind is dict:
        out = {}
        for k, v in dict.items(obj):
            if type(k) is not str:
                raise Unfrozen(f"{where} is a dict with a key of type {type(k).__name__}; use str keys")
            out[k] = _freeze(v, f"{where}[{k!r}]", depth + 1, count)
        return out
    if issubclass(kind, torch.Tensor):
        what = f"a Tensor subclass ({kind.__name__})"
    else:
        what = f"a {kind.__name__}"
    raise Unfrozen(
        f"{where} is {what}; return plain torch.Tensor outputs (alone, or in a tuple, list or dict)"
    )
