"""Input rotation for timing: how many input/output sets a timed callable cycles through so that
together they exceed L2, and building them (see `timing.py`'s docstring for why).

Pure Python but for `torch.Tensor` sizes; no CUDA is touched here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

ROTATE_TOTAL_BYTES = 256 * 1024 * 1024  # rotating sets together exceed this (> 4x an H200's L2)
MAX_ROTATE_SETS = 64
ROTATE_MEMORY_BYTES = 2 * 1024**3  # at most this much memory in extra input/output sets


def nbytes(args: Sequence[Any]) -> int:
    """Bytes of the tensors among `args` (other values count 0)."""
    return sum(a.numel() * a.element_size() for a in args if isinstance(a, torch.Tensor))


def rotation_sets(set_bytes: int) -> int:
    """How many distinct input/output sets of `set_bytes` each to rotate through so that together
    they exceed `ROTATE_TOTAL_BYTES` (1 when one set already does), within `MAX_ROTATE_SETS` and
    `ROTATE_MEMORY_BYTES`. Pure Python."""
    if set_bytes <= 0 or set_bytes >= ROTATE_TOTAL_BYTES:
        return 1
    n = math.ceil(ROTATE_TOTAL_BYTES / set_bytes)
    return max(1, min(n, MAX_ROTATE_SETS, ROTATE_MEMORY_BYTES // set_bytes))


def first_sets(
    input_sets: Sequence[Sequence[Any]] | Callable[[], Sequence[Any]] | None,
) -> list[Sequence[Any]]:
    """The argument tuples known before warm-up: [()] when fn takes no arguments, the given list,
    or one set from a builder (`add_rotation` builds the rest once the output size is known)."""
    if input_sets is None:
        return [()]
    if callable(input_sets):
        return [input_sets()]
    if not input_sets:
        raise ValueError("input_sets is empty")
    return list(input_sets)


def add_rotation(
    sets: list[Sequence[Any]],
    input_sets: Sequence[Sequence[Any]] | Callable[[], Sequence[Any]] | None,
    out_bytes: int,
) -> list[Sequence[Any]]:
    if callable(input_sets):
        n = rotation_sets(nbytes(sets[0]) + out_bytes)
        while len(sets) < n:
            sets.append(input_sets())
    return sets
