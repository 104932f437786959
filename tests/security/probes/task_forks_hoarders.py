"""Hostile task: its module body forks children that hold 300 MB each (the reference worker's
memory limit was per process too), then get_inputs reports how many are left. In the reference
worker's memory cgroup the kernel ends them; the test reads how many are left in the task's error."""

import os
import time

import torch
import torch.nn as nn

CHILDREN = 6
EACH = 300 * 1024 * 1024
_kids = []
for _ in range(CHILDREN):
    pid = os.fork()
    if pid == 0:
        hoard = bytearray(EACH)
        for i in range(0, EACH, 4096):
            hoard[i] = 1
        time.sleep(20)
        os._exit(0)
    _kids.append(pid)


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2.0 + 1.0


def _alive(pid):
    try:
        return os.waitpid(pid, os.WNOHANG)[0] == 0
    except ChildProcessError:  # reaped already (or never ours to wait for): gone
        return False


def get_inputs():
    time.sleep(8)  # each child has filled its hoard by now, or was ended doing so
    alive = sum(_alive(pid) for pid in _kids)
    raise RuntimeError(f"children alive: {alive} of {CHILDREN}")


def get_init_inputs():
    return []
