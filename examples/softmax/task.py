"""Row-wise softmax over the last dimension, fp32, KernelBench format.

get_inputs() is KernelBench-sized (8192 x 4000) for the GPU; get_cpu_inputs() is what the engine
uses in Triton's CPU interpreter. get_input_sets() adds a row length that is not a power of two.
"""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(8192, 4000) * 4]


def get_input_sets():
    return [[torch.randn(4096, 1000) * 4]]


def get_cpu_inputs():
    return [torch.randn(24, 200) * 4]


def get_cpu_input_sets():
    return [[torch.randn(5, 33) * 4]]


def get_init_inputs():
    return []
