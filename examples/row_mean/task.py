"""Mean over the last dimension of a 2-D tensor (KernelBench format): a row reduction."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.mean(x, dim=1)


def get_inputs():
    return [torch.randn(16384, 8192)]


def get_input_sets():
    # an irregular width: the tail of each row is masked
    return [[torch.randn(16384, 8192)], [torch.randn(1000, 4099)]]


def get_cpu_inputs():
    return [torch.randn(8, 300)]


def get_cpu_input_sets():
    return [[torch.randn(8, 300)], [torch.randn(3, 77)]]


def get_init_inputs():
    return []
