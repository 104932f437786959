"""Every `@triton.autotune` config checked in the interpreter, one a trial.

On a GPU the autotuner times its configs and keeps the fastest; which one that is, no CPU run can
tell, so in Triton's interpreter (which cannot time) a verdict that ran one config would vouch
for the others unchecked. Instead each trial runs a different config: trial k (counted over every
input set) runs config k modulo their number, after the candidate's own pruning
(`watch/launches.py`, `autotune_pick`). When an autotuner has more configs than the job has
trials, the job runs more trials on the first input set, one per config left, up to
`MAX_PICKS` in all; configs past that are a sample's remainder, named in the verdict's notes.
A failing trial's evidence names the configs it ran.

Two kernels autotuned in one forward run the same pick each: config k of each (modulo theirs).
What the candidate's process reports is bounded here (`MAX_CONFIGS`, `MAX_TEXT`): it is read,
never trusted for more than the notes' words.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MAX_PICKS = 16
"""Trials at most, normal and extra, that pick configs: configs past this are not checked."""
MAX_CONFIGS = 256
MAX_TEXT = 200
MAX_KERNELS = 32


@dataclass
class Tuned:
    configs: list[str]
    checked: set[int] = field(default_factory=set)


@dataclass
class Coverage:
    """The configs each autotuned kernel has and which of them the trials ran."""

    kernels: dict[str, Tuned] = field(default_factory=dict)

    def add(self, reported: list[dict[str, Any]]) -> str:
        """One trial's report (`Outputs.autotune`); the words that name what it ran ("" if none)."""
        ran = []
        for item in reported[:MAX_KERNELS]:
            try:
                kernel = str(item["kernel"])[:MAX_TEXT]
                configs = [str(c)[:MAX_TEXT] for c in list(item["configs"])[:MAX_CONFIGS]]
                index = int(item["index"])
            except (KeyError, TypeError, ValueError):
                continue
            if not configs or not 0 <= index < len(configs):
                continue
            tuned = self.kernels.setdefault(kernel, Tuned(configs))
            if tuned.configs != configs:  # pruned differently on other inputs: the new list counts
                tuned.configs, tuned.checked = configs, set()
            tuned.checked.add(index)
            ran.append(f"config {index + 1} of {len(configs)} of {kernel} ({configs[index]})")
        return "; ".join(ran)

    def picks_left(self, done: int) -> range:
        """The extra trials' picks after `done` trials: up to the largest config count, at most
        `MAX_PICKS` picks in all."""
        most = max((len(t.configs) for t in self.kernels.values()), default=0)
        return range(done, max(done, min(most, MAX_PICKS)))

    def notes(self) -> list[str]:
        """What the verdict says of each autotuned kernel's configs."""
        out = []
        for kernel, tuned in self.kernels.items():
            n = len(tuned.configs)
            if n == 1:
                continue
            missing = [i for i in range(n) if i not in tuned.checked]
            if not missing:
                out.append(f"@triton.autotune: each of {kernel}'s {n} configs ran a trial in the interpreter")
                continue
            named = "; ".join(f"{i + 1}: {tuned.configs[i]}" for i in missing[:6])
            more = f" and {len(missing) - 6} more" if len(missing) > 6 else ""
            out.append(
                f"@triton.autotune: {len(tuned.checked)} of {kernel}'s {n} configs ran a trial (at most "
                f"{MAX_PICKS}); not checked: {named}{more}. On a GPU the autotuner may pick one of those: "
                "prune the list, or verify there"
            )
        return [n[:1200] for n in out]
