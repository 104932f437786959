"""Linear layer with a fused epilogue (KernelBench format): y = silu(x @ W^T + b)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

IN_FEATURES = 512
OUT_FEATURES = 1024


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(self.linear(x))


def get_inputs():
    return [torch.randn(8192, IN_FEATURES)]


def get_cpu_inputs():
    # one row of output tiles in the interpreter
    return [torch.randn(40, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES]
