"""LayerNorm over the last three dimensions (modelled on KernelBench level 1, 40_LayerNorm, whose
rows are 4M elements long: too long for one program)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x)


batch_size = 3
features = 5
dim1 = 67
dim2 = 129


def get_inputs():
    return [torch.rand(batch_size, features, dim1, dim2)]


def get_input_sets():
    return [[torch.randn(7, features, dim1, dim2) * 3 + 1]]


def get_init_inputs():
    return [(features, dim1, dim2)]
