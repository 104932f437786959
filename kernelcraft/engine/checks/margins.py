"""A passing verdict's margin: how close its worst trial came to the tolerance.

The reference worker measures each float output's margin as it compares (`compare.Margin`: the
worst element's |out - ref| / (atol + rtol * |ref|), where it is, its two values, and the relative
L2 error over its limit) and sends the worst with a pass (`Compared.margin`). `Worst` keeps the
worst over the trials; the verdict's notes say it, and warn when it is within 2x of the tolerance
(`NEAR`): another draw of inputs may fail where this one passed (an attention kernel failed once on
1 of 786,432 values and passed the next run). What the reference sends is read with bounds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

NEAR = 0.5
"""A pass whose worst error is over this fraction of the tolerance is within 2x of it."""


@dataclass
class Worst:
    ratio: float = -1.0
    text: str = ""
    trial: int = 0

    def add(self, margin: dict[str, Any] | None, *, done: int) -> None:
        """One passing trial's margin (trial `done`, 0-based over every input set)."""
        if not margin:
            return
        try:
            ratio = max(float(margin.get("ratio", 0.0)), float(margin.get("l2_ratio", 0.0)))
        except (TypeError, ValueError):
            return
        if math.isfinite(ratio) and ratio > self.ratio:
            self.ratio, self.text, self.trial = ratio, str(margin.get("text", ""))[:400], done

    def notes(self) -> list[str]:
        if self.ratio < 0:
            return []
        said = f"margin: {self.text} (trial {self.trial + 1})"
        if self.ratio > NEAR:
            return [
                f"near the tolerance: the worst error is within 2x of it, so another draw of inputs "
                f"may fail where these passed; {said}"
            ]
        return [said]
