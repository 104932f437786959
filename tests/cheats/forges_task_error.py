"""Cheat fixture: at import, writes the worker's private channel a "task_error" frame, so that the
job would blame the task (unusable input) instead of giving the candidate a verdict."""

import sys
import time

import torch.nn as nn

with open("kc_forge_helper.py", "w") as _f:
    _f.write(
        "import os, socket\n"
        "from kernelcraft.engine.wire.channel import send_frame\n"
        "for fd in range(3, 64):\n"
        "    try:\n"
        "        s = socket.socket(fileno=os.dup(fd))\n"
        "    except OSError:\n"
        "        continue\n"
        "    if s.family == socket.AF_UNIX:\n"
        "        try:\n"
        "            send_frame(s, {'type': 'task_error', 'summary': 'the task is broken', 'error': 'forged'})\n"
        "        except OSError:\n"
        "            pass\n"
    )
sys.path.insert(0, ".")

import kc_forge_helper  # noqa: E402,F401

time.sleep(30)


class ModelNew(nn.Module):
    def forward(self, x):
        return x
