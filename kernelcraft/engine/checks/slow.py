"""Where the interpreter's time goes: per kernel, its launches, programs and seconds.

Triton's interpreter runs a kernel's programs one after another in Python (about a millisecond a
program instance), so a trial's time is its programs'. The candidate's process counts each
interpreted launch's programs (the grid's product) and time (`watch/launches.py`,
`LaunchRecorder.interpreted`) and reports them with its outputs; `Spent` adds them up over the
trials. The verdict's notes say where the time went when the interpreter took more than
`SLOW_S`, with the cause (the kernel with the most time, its programs, the time a program) and
what to do about it. What the candidate reports is read with bounds: it only words a note.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

SLOW_S = 20.0
"""Interpreter seconds over every trial beyond which the verdict says where they went."""
MAX_KERNELS = 64


@dataclass
class Spent:
    kernels: dict[str, list[float]] = field(default_factory=dict)

    def add(self, reported: dict[str, Any]) -> None:
        for name, entry in list(reported.items())[:MAX_KERNELS]:
            try:
                launches, programs, seconds = (float(x) for x in list(entry)[:3])
            except (TypeError, ValueError):
                continue
            if not all(math.isfinite(x) and x >= 0 for x in (launches, programs, seconds)):
                continue
            total = self.kernels.setdefault(str(name)[:120], [0.0, 0.0, 0.0])
            total[0], total[1], total[2] = total[0] + launches, total[1] + programs, total[2] + seconds

    def seconds(self) -> float:
        return sum(e[2] for e in self.kernels.values())

    def notes(self) -> list[str]:
        total = self.seconds()
        if total <= SLOW_S:
            return []
        ranked = sorted(self.kernels.items(), key=lambda kv: -kv[1][2])
        parts = []
        for name, (launches, programs, seconds) in ranked[:4]:
            each = f", {1000 * seconds / programs:.2g} ms a program" if programs else ""
            parts.append(
                f"{name} {seconds:.0f} s over {launches:.0f} launches of {programs:,.0f} programs in all{each}"
            )
        return [
            f"slow in Triton's interpreter: its kernels took {total:.0f} s over the trials ({'; '.join(parts)}). "
            "The interpreter runs programs one at a time: fewer, larger blocks (a bigger BLOCK, a grid "
            "that does more per program) or smaller --cpu-sizes make it faster; the GPU's speed is "
            "not this"[:1200]
        ]
