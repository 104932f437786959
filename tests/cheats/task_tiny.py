"""Cheat-suite task whose outputs are all tiny (|y| < 1e-4): atol alone cannot judge it."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * 1e-6


def get_inputs():
    return [torch.randn(16, 40)]


def get_init_inputs():
    return []
