"""Cheat-suite task: y = relu(x) * 2 + 1 on a small fp32 matrix (signed inputs)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x) * 2.0 + 1.0


def get_inputs():
    return [torch.randn(33, 65)]


def get_init_inputs():
    return []
