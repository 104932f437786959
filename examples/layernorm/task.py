"""LayerNorm over the last dimension (KernelBench format), with learnt weight and bias."""

import torch
import torch.nn as nn

N = 1024  # normalized size: fixed by the model's parameters, the same on GPU and CPU


class Model(nn.Module):
    def __init__(self, n: int, eps: float = 1e-5):
        super().__init__()
        self.norm = nn.LayerNorm(n, eps=eps)
        # non-trivial affine parameters, drawn after the seed both models share
        with torch.no_grad():
            self.norm.weight.normal_(1.0, 0.1)
            self.norm.bias.normal_(0.0, 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


def get_inputs():
    return [torch.randn(16384, N)]


def get_cpu_inputs():
    # Triton's interpreter runs ~1 ms per program instance: a few rows only
    return [torch.randn(6, N)]


def get_init_inputs():
    return [N]
