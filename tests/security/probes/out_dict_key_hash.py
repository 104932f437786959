"""Hostile candidate: forward returns a dict whose key is a str subclass that computes the answer
in PyTorch when it is hashed or compared (the harness sorts and looks up the keys afterwards)."""

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


class Key(str):
    def __hash__(self):
        self.y.copy_(torch.relu(self.x) * 2.0 + 1.0)
        return str.__hash__(self)

    def __lt__(self, other):
        hash(self)
        return str.__lt__(self, other)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        launch(x, y)
        k = Key("out")
        k.x, k.y = x, y
        return {k: y}
