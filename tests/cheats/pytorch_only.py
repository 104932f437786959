"""Cheat fixture: pytorch only (see tests/engine/host/test_verify_cheats.py for the expected verdict)."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2.0 + 1.0
