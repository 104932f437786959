"""What the passing trials saw, beyond their verdict, and the notes a pass carries for it.

`Findings` gathers, trial by trial, the `@triton.autotune` configs that ran (`autotune.py`), the
worst margin to the tolerance (`margins.py`) and where the interpreter's time went (`slow.py`);
`pass_notes` is what a passing verdict says of them and of how it was reached (the interpreter,
TF32 rounding, a branch on the device, AdaExplore's rule).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kernelcraft.engine.checks import autotune, margins, slow
from kernelcraft.engine.source import devices


@dataclass
class Findings:
    autotune: autotune.Coverage = field(default_factory=autotune.Coverage)
    margin: margins.Worst = field(default_factory=margins.Worst)
    spent: slow.Spent = field(default_factory=slow.Spent)

    def notes(self) -> list[str]:
        return [*self.autotune.notes(), *self.margin.notes(), *self.spent.notes()]


def pass_notes(
    findings: Findings,
    *,
    interpret: bool,
    tf32_dots: int,
    candidate_source: str,
    correctness: str,
    torch_ops: list[str],
) -> list[str]:
    """A passing verdict's own notes (after the job's)."""
    notes = findings.notes()
    if interpret:
        tf32 = (
            f" (its {tf32_dots} fp32 tl.dot call(s) were rounded to TF32, as on a GPU)" if tf32_dots else ""
        )
        notes.append(
            f"ran in Triton's CPU interpreter: races, out-of-bounds reads and speed are not checked{tf32}"
        )
        notes.extend(devices.note(candidate_source))  # a GPU-only way (`source/devices.py`)
    if correctness == "adaexplore":
        ops = ", ".join(op if "::" in op else f"aten.{op}" for op in torch_ops[:12]) or "none"
        notes.append(
            f"judged by AdaExplore's rule (PyTorch allowed beside the Triton kernels, atol=rtol=5e-2, "
            f"no knockout); PyTorch compute left in forward: {ops}"
        )
    return notes
