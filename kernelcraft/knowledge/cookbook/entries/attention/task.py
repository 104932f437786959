"""Scaled dot-product attention, no mask (modelled on KernelBench level 1,
97_ScaledDotProductAttention)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.scaled_dot_product_attention(Q, K, V)


batch_size = 2
num_heads = 3
sequence_length = 100
embedding_dimension = 64


def get_inputs():
    shape = (batch_size, num_heads, sequence_length, embedding_dimension)
    return [torch.rand(shape), torch.rand(shape), torch.rand(shape)]


def get_input_sets():
    # a head size over the fused kernel's limit (KernelBench's is 1024): the three-kernel path
    shape = (1, 2, 40, 160)
    return [[torch.randn(shape), torch.randn(shape), torch.randn(shape)]]


def get_init_inputs():
    return []
