"""The modules of a candidate's own that it imports: where a worker would find them
(`local_search_path`) and which import statement brings in which source file (`local_imports`),
found by reading directories only, never by importing. `static.py` checks those files as it checks
the candidate. Written by the evaluation engine only.
"""

from __future__ import annotations

import ast
import os
import site
import sysconfig
from collections.abc import Iterator
from importlib.machinery import PathFinder
from pathlib import Path


def local_search_path() -> list[str]:
    """Where a worker finds modules that are not installed: the directory above the kernelcraft
    package (an editable install's checkout) and the PYTHONPATH it inherits, minus the standard
    library and site-packages (whose modules are packages, not the candidate's own code)."""
    installed = {Path(p).resolve() for p in site.getsitepackages() + [site.getusersitepackages()]}
    installed |= {
        Path(sysconfig.get_paths()[k]).resolve() for k in ("stdlib", "platstdlib", "purelib", "platlib")
    }
    entries = [str(Path(__file__).resolve().parents[3]), *os.environ.get("PYTHONPATH", "").split(os.pathsep)]
    out = []
    for e in entries:
        if e and Path(e).resolve() not in installed and e not in out:
            out.append(e)
    return out


def local_imports(tree: ast.Module, search_path: list[str]) -> Iterator[tuple[int, str, Path]]:
    """(line, module, file) for each import that resolves to a source file on `search_path`.
    Resolution reads directories only: nothing is imported."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        else:
            continue
        for name in names:
            file = find_source(name, search_path)
            if file is not None:
                yield node.lineno, name, file


def find_source(dotted: str, search_path: list[str]) -> Path | None:
    """The .py file `dotted` names on `search_path` (a package's `__init__.py`), if any."""
    parts = dotted.split(".")
    spec = PathFinder.find_spec(parts[0], search_path)
    for part in parts[1:]:
        if spec is None or not spec.submodule_search_locations:
            return None
        spec = PathFinder.find_spec(part, list(spec.submodule_search_locations))
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    return Path(spec.origin)
