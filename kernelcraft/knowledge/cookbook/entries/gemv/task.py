"""Matrix-vector product: y = A @ x, A (M, K), x (K, 1) (modelled on KernelBench level 1,
4_Matrix_vector_multiplication_, whose K is a million)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


M = 37
K = 20000


def get_inputs():
    return [torch.rand(M, K), torch.rand(K, 1)]


def get_init_inputs():
    return []
