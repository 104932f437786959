"""Batched matrix multiplication: C[b] = A[b] @ B[b] (modelled on KernelBench level 1,
3_Batched_matrix_multiplication)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.bmm(A, B)


batch_size = 3
m = 130
k = 72
n = 136


def get_inputs():
    return [torch.rand(batch_size, m, k), torch.rand(batch_size, k, n)]


def get_init_inputs():
    return []
