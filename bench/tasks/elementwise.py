"""8192x8192 fp32 elementwise (KernelBench-sized): y = relu(a + b) * 0.5."""

import torch
import torch.nn as nn

M = 8192
N = 8192


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.relu(a + b) * 0.5


def get_inputs():
    return [torch.randn(M, N), torch.randn(M, N)]


def get_init_inputs():
    return []
