"""The `kernelcraft` command's entry point (`python -m kernelcraft` too).

Where this Python keeps no bytecode for torch, the command keeps its own first
(`kernelcraft/base/bytecode.py`), before the command line's modules are imported: they are what a
fresh process compiles first. Then a one-off evaluation (`verify`, `profile`, `compile`) starts its
evaluator's zygote (`kernelcraft/engine/machine/prestart.py`), which imports torch while the command line
is read. Both take the settings read here, once (`base/knobs.py`), as the command's evaluator
will get them (`cli/__init__.py` reads the same, kept, values); a bad value leaves both alone, for
the command line to report in one line.
"""

from __future__ import annotations


def main() -> None:
    import sys

    from kernelcraft.base import bytecode, knobs
    from kernelcraft.base.errors import UsageError

    try:
        settings = knobs.settings()
    except UsageError:  # the command line says so, in one line
        settings = None
    if settings is not None:
        bytecode.use_cache(settings)
    from kernelcraft.engine import prestart

    try:
        if settings is not None:  # a one-off evaluation's zygote, before the command line is read
            prestart.start(sys.argv[1:], settings)
    except Exception:  # (only a head start: the evaluator meets and reports the same trouble)
        pass
    from kernelcraft.cli import main as run

    run()
