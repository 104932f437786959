"""Argmax over one dimension (modelled on KernelBench level 1, 51_Argmax_over_a_dimension; 52
is argmin)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.argmax(x, dim=self.dim)


batch_size = 3
dim1 = 300
dim2 = 77


def get_inputs():
    return [torch.rand(batch_size, dim1, dim2)]


def get_input_sets():
    # a row reduction (inner size 1), and ties: the first index must win, as in PyTorch
    return [[torch.rand(5, 1000, 1)], [torch.randint(0, 3, (4, 50, 33)).float()]]


def get_init_inputs():
    return [1]
