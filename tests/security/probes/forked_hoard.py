"""Hostile candidate: its memory limit is per process, so it forks children that each stay under
it and together go far past it (each child holds 300 MB and waits). A memory cgroup counts them
all: the job must end with an out-of-memory verdict, and the machine keep its memory."""

import os
import time

import torch
import torch.nn as nn

CHILDREN = 6
EACH = 300 * 1024 * 1024


class ModelNew(nn.Module):
    def forward(self, x):
        for _ in range(CHILDREN):
            if os.fork() == 0:
                hoard = bytearray(EACH)
                for i in range(0, EACH, 4096):  # touch every page: resident, charged
                    hoard[i] = 1
                time.sleep(60)
                os._exit(0)
        time.sleep(30)
        return torch.relu(x) * 2.0 + 1.0
