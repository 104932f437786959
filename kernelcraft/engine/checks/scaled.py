"""The small-magnitude trial: one of verify's trials runs on inputs scaled by 2^-10.

A kernel can be wrong only where its inputs are small: an RMSNorm or LayerNorm that leaves out
its `eps` matches the reference on `randn` inputs (mean(x²) ≈ 1 swamps eps = 1e-5), and so does
any kernel that drops an additive constant that is small beside the data. With every
floating-point input multiplied by 2^-10 (exact in every float format: only the exponent moves),
mean(x²) ≈ 1e-6 and eps decides the answer, so the same kernel fails.

The job asks for it on the last trial of the first input set when there are at least two trials;
the trusted reference worker scales the inputs it draws (the candidate receives the same scaled
tensors) unless the task defines `KERNELCRAFT_SCALED_TRIAL = False` (inputs whose values are
meaningful as they are: probabilities that must sum to one, masks stored as floats, indices
carried in float tensors). Integer, boolean and complex tensors are never scaled. A failure on
this trial says so in its evidence.
"""

from __future__ import annotations

from typing import Any

SCALE = 2.0**-10
OPT_OUT = "KERNELCRAFT_SCALED_TRIAL"
NOTE = "on inputs scaled by 2^-10 (the small-magnitude trial: a missing eps or a dropped constant shows here)"


def task_allows(task: Any) -> bool:
    """False when the task defines `KERNELCRAFT_SCALED_TRIAL = False`."""
    return getattr(task, OPT_OUT, True) is not False


def is_scaled_trial(input_set: int, trial: int, trials: int) -> bool:
    """The last trial of the first input set, when verify runs at least two."""
    return input_set == 0 and trials >= 2 and trial == trials - 1


def scale_inputs(inputs: list[Any], scale: float) -> list[Any]:
    """The inputs with every floating-point tensor multiplied by `scale` (others as they are)."""
    import torch

    return [x * scale if isinstance(x, torch.Tensor) and x.dtype.is_floating_point else x for x in inputs]
