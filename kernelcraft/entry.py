"""The `kernelcraft` command's entry point (`python -m kernelcraft` too).

Where this Python keeps no bytecode for torch, the command keeps its own first
(`kernelcraft/base/bytecode.py`), before the command line's modules are imported: they are what a
fresh process compiles first. Then a one-off evaluation (`verify`, `profile`, `compile`) starts its
evaluator's zygote (`kernelcraft/engine/machine/prestart.py`), which imports torch while the command line
is read.
"""

from __future__ import annotations


def main() -> None:
    import sys

    from kernelcraft.base import bytecode

    bytecode.use_cache()
    from kernelcraft.engine import prestart

    try:
        prestart.start(sys.argv[1:])  # a one-off evaluation's zygote, before the command line is read
    except Exception:  # (only a head start: the evaluator meets and reports the same trouble)
        pass
    from kernelcraft.cli import main as run

    run()
