"""Probe task: the sum of each row and the whole sum, of a matrix whose row count each draw picks
(4 to 8): the fresh-input replay cannot re-run a trial's record on another draw's shapes."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x.sum(dim=1), x.sum()


def get_inputs():
    return [torch.randn(int(torch.randint(4, 9, ())), 40)]


def get_init_inputs():
    return []
