"""Fused elementwise: y = gelu(x * scale + bias) * 0.5 + x, fp32, KernelBench format.

get_inputs() is KernelBench-sized (8192 x 8192) for the GPU; get_cpu_inputs() is what the engine
uses instead in Triton's CPU interpreter (odd sizes on purpose: masks must be right).
"""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(x * self.scale + self.bias) * 0.5 + x


M, N = 8192, 8192


def get_inputs():
    return [torch.randn(M, N)]


def get_input_sets():
    return [[torch.randn(1000, 1000)]]


def get_cpu_inputs():
    return [torch.randn(37, 129)]


def get_cpu_input_sets():
    return [[torch.randn(3, 2000)]]


def get_init_inputs():
    return [1.7]
