"""A tall-skinny product: C = A @ B with a small inner dimension (modelled on KernelBench level 1,
9_Tall_skinny_matrix_multiplication_ and 7_Matmul_with_small_K_dimension_): the output is
large and the work per output element is small."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


M = 300
N = 24


def get_inputs():
    return [torch.rand(M, N), torch.rand(N, M)]


def get_input_sets():
    return [[torch.rand(130, 40), torch.rand(40, 270)]]


def get_init_inputs():
    return []
