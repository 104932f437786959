"""C = A @ B in fp32 (modelled on KernelBench level 1, 1_Square_matrix_multiplication_ and
2_Standard_matrix_multiplication_), at irregular sizes so that every edge tile is masked."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


M = 200
K = 136
N = 260


def get_inputs():
    return [torch.rand(M, K), torch.rand(K, N)]


def get_input_sets():
    # a transposed (non-contiguous) A, as in KernelBench's 16_Matmul_with_transposed_A
    # and a long K under an output of one tile: the split-K path (KernelBench's 6_Matmul_with_large_K)
    return [[torch.rand(72, 130).T, torch.rand(72, 40)], [torch.rand(40, 8200), torch.rand(8200, 24)]]


def get_init_inputs():
    return []
