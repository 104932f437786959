"""The `kernelcraft` command's entry point (`python -m kernelcraft` too).

Where this Python keeps no bytecode for torch, the command keeps its own first
(`kernelcraft/base/bytecode.py`), before the command line's modules are imported: they are what a
fresh process compiles first.
"""

from __future__ import annotations


def main() -> None:
    from kernelcraft.base import bytecode

    bytecode.use_cache()
    from kernelcraft.cli import main as run

    run()
