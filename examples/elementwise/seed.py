"""A seed Triton kernel for examples/elementwise: one program per BLOCK_SIZE elements."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def gelu_residual_kernel(x_ptr, bias_ptr, y_ptr, n_elements, scale, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offs = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask)
    bias = tl.load(bias_ptr)
    z = x * scale + bias
    # exact (erf) GELU, as torch.nn.functional.gelu's default
    g = 0.5 * z * (1.0 + tl.erf(z * 0.7071067811865476))
    tl.store(y_ptr + offs, g * 0.5 + x, mask=mask)


def gelu_residual(x: torch.Tensor, bias: torch.Tensor, scale: float) -> torch.Tensor:
    assert x.is_contiguous() and x.dtype == torch.float32
    y = torch.empty_like(x)
    n_elements = x.numel()
    grid = lambda meta: (triton.cdiv(n_elements, meta["BLOCK_SIZE"]),)
    gelu_residual_kernel[grid](x, bias, y, n_elements, scale, BLOCK_SIZE=1024)
    return y


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return gelu_residual(x.contiguous(), self.bias, self.scale)
