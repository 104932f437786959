"""What a candidate's kernels need of a shrunk task's sizes (`Multiples`), for the CPU shrink.

The host reads what the candidate's kernels divide the task's sizes by (`source/divisors.py`)
and which sizes no block tiles on its own (`source/gridmap.py`); the reference worker's shrink
(`source/shrink.py`, `worker/sizing.py`) keeps the shrunk sizes multiples of them. Pure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


def twos(v: int) -> int:
    """How many factors of two `v` has (0 for 0)."""
    n = 0
    while v and v % 2 == 0:
        v, n = v // 2, n + 1
    return n


@dataclass(frozen=True)
class Multiples:
    """A shrunk size stays a multiple of `need(name, v)`, where `v` is its size in the task: of
    each of `values` (block sizes, asserted divisors) that divided `v`, so a kernel without
    masks still tiles it exactly. `products`: also keep as many factors of two as the largest
    power-of-two value takes, up to `v`'s own, so that any product of sizes (an element count,
    the rows of a flattened view) a block divided still divides; the shrink asks for it where
    the first rule left such a product undivided (`broken`), as it keeps sizes larger.

    `untiled`: sizes no block tiles on its own, which shrink as for any candidate (but under
    `products`): those the candidate launches one program per index of (its grid `(rows,)`),
    or, when `flat`, every size of the inputs' own: the candidate reads its inputs only as
    flat buffers (`x.numel()`), so only their element counts must stay divided (`broken`)."""

    values: tuple[int, ...] = ()
    products: bool = False
    untiled: frozenset[str] = frozenset()
    flat: bool = False

    @classmethod
    def of(cls, values: list[int], untiled: list[str] | None = None, flat: bool = False) -> Multiples:
        return cls(tuple(sorted({v for v in values if v >= 2})), untiled=frozenset(untiled or ()), flat=flat)

    def __bool__(self) -> bool:
        return bool(self.values)

    def need(self, name: str, v: int) -> int:
        """What size `name`, `v` in the task, must stay a multiple of when shrunk (a divisor of `v`)."""
        out = 1
        if (name in self.untiled and not self.products) or not self.values:
            return out
        for m in self.values:
            if v % m == 0:
                out = math.lcm(out, m)
        if self.products:
            out = math.lcm(out, 1 << min(twos(v), max(twos(m) for m in self.values)))
        return out

    def twos_left(self, name: str, v: int) -> int:
        """How many factors of two `v` may lose and keep `need(name, v)`."""
        return twos(v) - twos(self.need(name, v))

    def broken(
        self, full: list[list[int]], trial: list[list[int]], changes: dict[str, list[int]]
    ) -> str | None:
        """The first extent of an input (a dimension, or the product of adjacent ones: an element
        count, a flattened view's rows; when `flat`, its element count alone) that one of
        `values` divided at the task's sizes (`full`) and not at the trials' (`trial`), leaving
        out those made of `untiled` sizes alone (told apart by `changes`, {name: [old, new]});
        None when each still divides."""
        free = set() if self.flat else {(o, n) for name, (o, n) in changes.items() if name in self.untiled}
        for i, (a, b) in enumerate(zip(full, trial, strict=False)):
            if len(a) != len(b):
                continue
            spans = (
                [(0, len(a))]
                if self.flat
                else [(lo, hi) for lo in range(len(a)) for hi in range(lo + 1, len(a) + 1)]
            )
            for lo, hi in spans:
                if all((a[k], b[k]) in free for k in range(lo, hi)):
                    continue
                pa, pb = math.prod(a[lo:hi]), math.prod(b[lo:hi])
                for m in self.values:
                    if pa % m == 0 and pb % m:
                        return f"input {i + 1}'s dims {lo}..{hi - 1}: {pa} -> {pb}, {m} no longer divides"
        return None
