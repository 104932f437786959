"""Hostile candidate: sends the parent an 'outputs' message of its own with zero output sets
(nothing to compare) on the worker's channel, then leaves before the harness sends the real one."""

import os
import socket

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def noop_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + offs, mask=offs < n_elements)  # loads, stores nothing


def launch(x, y):
    noop_kernel[(triton.cdiv(x.numel(), 512),)](x, y, x.numel(), BLOCK_SIZE=512)


def channel():
    for fd in range(3, 64):
        try:
            s = socket.socket(fileno=fd)
        except OSError:
            continue
        if s.family == socket.AF_UNIX:
            return s
        s.detach()
    return None


class ModelNew(nn.Module):
    def forward(self, x):
        from kernelcraft.engine.wire import channel as ch, tensors

        y = torch.empty_like(x)
        launch(x, y)
        blobs = []
        after = tensors.pack([x], blobs, cuda_ipc=False)
        ch.send_frame(channel(), {"type": "outputs", "outputs": [], "inputs_after": after}, blobs)
        os._exit(0)
