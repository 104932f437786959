"""A standard 2-D convolution, no bias (modelled on KernelBench level 1,
63_conv_standard_2D__square_input__square_kernel and its asymmetric, strided, padded and dilated
variants 55, 56, 62 and 80)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int,
        stride: int = 1,
        padding: int = 0,
        dilation: int = 1,
        groups: int = 1,
        bias: bool = False,
    ):
        super().__init__()
        self.conv2d = nn.Conv2d(
            in_channels,
            out_channels,
            (kernel_size, kernel_size),
            stride=stride,
            padding=padding,
            dilation=dilation,
            groups=groups,
            bias=bias,
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv2d(x)


batch_size = 2
in_channels = 5
out_channels = 24
kernel_size = 3
height = 23
width = 37


def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]


stride = 2
padding = 1
dilation = 2


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride, padding, dilation]
