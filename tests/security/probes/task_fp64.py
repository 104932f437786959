"""Task: y = (x + 1000) - 1000 in float64. Computed in float32, the answer is off by up to 3e-5:
within float32's tolerance, far outside float64's."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return (x + 1000.0) - 1000.0


def get_inputs():
    return [torch.randn(40, 50, dtype=torch.float64)]


def get_init_inputs():
    return []
