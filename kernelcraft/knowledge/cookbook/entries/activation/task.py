"""GELU (exact, erf form) of a large tensor (modelled on KernelBench level 1, 26_GELU_; 19-32 and
88_MinGPTNewGelu are other activations of the same shape)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(x)


batch_size = 16
dim = 3001


def get_inputs():
    return [torch.randn(batch_size, dim) * 3]


def get_init_inputs():
    return []
