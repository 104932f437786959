"""8192x4000 fp32 row softmax (KernelBench-sized)."""

import torch
import torch.nn as nn

M = 8192
N = 4000


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=1)


def get_inputs():
    return [torch.randn(M, N)]


def get_init_inputs():
    return []
