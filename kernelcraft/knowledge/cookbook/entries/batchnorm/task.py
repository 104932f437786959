"""BatchNorm2d in training mode: batch statistics over (N, H, W) per channel (the op of
KernelBench level 1, 33_BatchNorm, which KernelBench's harness runs in training mode, as
kernelcraft does by default; written with F.batch_norm(training=True) so that it means batch
statistics under --eval-mode too)."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, num_features: int):
        super().__init__()
        self.bn = nn.BatchNorm2d(num_features=num_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.batch_norm(x, None, None, self.bn.weight, self.bn.bias, training=True, eps=self.bn.eps)


batch_size = 3
features = 6
dim1 = 91
dim2 = 97


def get_inputs():
    return [torch.rand(batch_size, features, dim1, dim2)]


def get_input_sets():
    return [[torch.randn(5, features, 7, 9) * 3 + 2]]


def get_init_inputs():
    return [features]
