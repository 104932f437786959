"""Cheat-suite task: RMSNorm over the features of each row, with its eps (KernelBench's 36_RMSNorm_)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, eps: float = 1e-5):
        super().__init__()
        self.eps = eps

    def forward(self, x):
        return x / torch.sqrt(torch.mean(x**2, dim=-1, keepdim=True) + self.eps)


def get_inputs():
    return [torch.randn(8, 64)]


def get_init_inputs():
    return []
