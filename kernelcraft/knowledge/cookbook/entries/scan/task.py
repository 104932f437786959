"""Cumulative sum along a dimension (modelled on KernelBench level 1, 89_cumsum; 90_cumprod,
91_cumsum_reverse and 92_cumsum_exclusive are the same scan with another op or direction)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.cumsum(x, dim=self.dim)


batch_size = 5
input_shape = (5000,)
dim = 1


def get_inputs():
    return [torch.rand(batch_size, *input_shape)]


def get_input_sets():
    # a scanned dim that is not the last one (it is moved last), and a short one
    return [[torch.rand(4, 300, 3)], [torch.randn(70, 33)]]


def get_init_inputs():
    return [dim]
