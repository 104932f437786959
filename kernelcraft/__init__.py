"""kernelcraft: tools for writing fast, correct Triton kernels for PyTorch operators.

An MCP server (compile, verify, profile, a rulebook that learns from failures, hardware-manual
search and a search tree) and a driver agent that uses the same tools.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("kernelcraft")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+source"
