"""Probe task: the sum of each row of a small fp32 matrix, and the whole sum."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x.sum(dim=1), x.sum()


def get_inputs():
    return [torch.randn(6, 40)]


def get_init_inputs():
    return []
