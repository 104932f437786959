"""Depthwise 2-D convolution, groups = channels, no bias (modelled on KernelBench level 1,
82_conv_depthwise_2D_square_input_square_kernel; 83-85 vary the kernel's and input's shape)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels: int, kernel_size: int, stride: int = 1, padding: int = 0, bias: bool = False):
        super().__init__()
        self.conv2d = nn.Conv2d(
            in_channels, in_channels, kernel_size, stride=stride, padding=padding, groups=in_channels, bias=bias
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv2d(x)


batch_size = 2
in_channels = 6
kernel_size = 3
width = 75
height = 41
stride = 2
padding = 1


def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, kernel_size, stride, padding]
