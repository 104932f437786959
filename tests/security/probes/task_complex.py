"""Probe task: a complex output, relu(x) * 2 + 1 + i * x."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.complex(torch.relu(x) * 2.0 + 1.0, x)


def get_inputs():
    return [torch.randn(33, 65)]


def get_init_inputs():
    return []
