"""Sum over one dimension, keeping it (modelled on KernelBench level 1,
47_Sum_reduction_over_a_dimension; 48 mean, 49 max and 53 min differ only in the op)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x, dim=self.dim, keepdim=True)


batch_size = 3
dim1 = 300
dim2 = 77
reduce_dim = 1


def get_inputs():
    return [torch.rand(batch_size, dim1, dim2)]


def get_input_sets():
    # a reduced dim that is the innermost (inner size 1: a row reduction), and a short one
    return [[torch.rand(5, 1000, 1)], [torch.rand(33, 4, 9)]]


def get_init_inputs():
    return [reduce_dim]
