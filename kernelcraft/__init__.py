"""kernelcraft: tools for writing fast, correct Triton kernels for PyTorch operators.

An MCP server (compile, verify, profile, a rulebook that learns from failures, hardware-manual
search and a search tree) and a driver agent that uses the same tools.
"""

from __future__ import annotations

import functools


@functools.cache
def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("kernelcraft")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "0.0.0+source"


def __getattr__(name: str) -> str:
    # `__version__` is looked up when asked for: importlib.metadata costs every process that
    # imports the package (the CLI, the evaluator's zygote, each spawned worker) 55 ms otherwise.
    if name == "__version__":
        return _version()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
