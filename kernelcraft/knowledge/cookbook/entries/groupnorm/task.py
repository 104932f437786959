"""GroupNorm of an NCHW tensor (modelled on KernelBench level 1, 35_GroupNorm_, whose groups
are 2M elements each)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, num_features: int, num_groups: int):
        super().__init__()
        self.gn = nn.GroupNorm(num_groups=num_groups, num_channels=num_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gn(x)


batch_size = 3
features = 12
num_groups = 3
dim1 = 45
dim2 = 61


def get_inputs():
    return [torch.rand(batch_size, features, dim1, dim2)]


def get_input_sets():
    # groups shorter than one chunk: the one-kernel path
    return [[torch.randn(4, features, 5, 9) * 2 + 1]]


def get_init_inputs():
    return [features, num_groups]
