"""The figures a job is sized by (`worker/sizing.py`): frame bounds and memory rest on them."""

from __future__ import annotations

import types

import torch
import torch.nn as nn

from kernelcraft.engine.worker import sizing


class _Matmul(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a @ b


def _task(sets: list[list[torch.Tensor]] | None) -> types.SimpleNamespace:
    task = types.SimpleNamespace(
        Model=_Matmul,
        get_inputs=lambda: [torch.rand(8, 4), torch.rand(4, 8)],
        get_init_inputs=lambda: [],
    )
    if sets is not None:
        task.get_input_sets = lambda: sets
    return task


def test_the_figures_are_the_largest_input_sets_not_only_the_first() -> None:
    # the gemm entry's long-K set is 8x its first set's bytes: its frames were refused as oversized
    big = [[torch.rand(40, 820), torch.rand(820, 24)]]
    sized = sizing.measure(_task(big), interpret=True)
    assert sized["inputs"] == (40 * 820 + 820 * 24) * 4
    assert sized["outputs"] == 40 * 24 * 4  # the first set's output is 64 elements
    assert sizing.measure(_task(None), interpret=True)["inputs"] == (32 + 32) * 4


def test_a_set_smaller_than_the_first_leaves_the_first_sets_figures() -> None:
    sized = sizing.measure(_task([[torch.rand(2, 4), torch.rand(4, 2)]]), interpret=True)
    assert (sized["inputs"], sized["outputs"]) == ((32 + 32) * 4, 64 * 4)
