"""Loading a task or a candidate in a worker: the import by path.

`import_source` writes the source to a file (Triton's `@triton.jit` reads its kernels' source
from a file) and imports it under a fresh module name. The checks the parent makes before any
process starts are the intake's (`source/intake.py`).

Written by the evaluation engine only.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def import_source(source: str, directory: Path, module_name: str) -> ModuleType:
    """Write `source` to `directory/module_name.py` and import it as `module_name`."""
    path = directory / f"{module_name}.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module
