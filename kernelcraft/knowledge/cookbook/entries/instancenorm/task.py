"""InstanceNorm2d (no affine, no running statistics; modelled on KernelBench level 1,
34_InstanceNorm, whose planes are 512 x 512)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, num_features: int):
        super().__init__()
        self.inorm = nn.InstanceNorm2d(num_features=num_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inorm(x)


batch_size = 2
features = 5
dim1 = 97
dim2 = 101


def get_inputs():
    return [torch.rand(batch_size, features, dim1, dim2)]


def get_input_sets():
    # planes shorter than one chunk: the one-kernel path
    return [[torch.randn(3, features, 13, 17) * 2 - 1]]


def get_init_inputs():
    return [features]
