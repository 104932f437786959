"""Loading tasks and candidates: the checks the parent makes before any process starts, and the
import by path that workers do.

A task is a KernelBench problem file (`Model`, `get_inputs`, `get_init_inputs`, optionally
`get_input_sets`, `get_cpu_inputs`, `get_cpu_input_sets`); a candidate defines `ModelNew`.
`check_task` / `check_candidate` parse the source with `ast` and raise `TaskError` naming the file
and line, so the CLI exits 2 at once. `import_source` writes the source to a file (Triton's
`@triton.jit` reads its kernels' source from a file) and imports it under a fresh module name.

Smaller inputs in the interpreter: a task may define `get_cpu_inputs()` (and
`get_cpu_input_sets()`) returning shapes small enough for Triton's CPU interpreter; the engine
uses them instead of `get_inputs()` / `get_input_sets()` when it runs without a GPU. KernelBench
files, which have neither, run unchanged with their own shapes.

Written by the evaluation engine only.
"""

from __future__ import annotations

import ast
import importlib.util
import stat
import sys
from pathlib import Path
from types import ModuleType

from kernelcraft.base.errors import TaskError

TASK_REQUIRED = ("Model", "get_inputs", "get_init_inputs")
TASK_OPTIONAL = ("get_input_sets", "get_cpu_inputs", "get_cpu_input_sets")


def parse(source: str, path: str) -> ast.Module:
    """The module's AST, or a `TaskError` at the line of the syntax error."""
    try:
        return ast.parse(source, filename=path)
    except SyntaxError as e:
        raise TaskError(f"syntax error: {e.msg}; fix the file and retry", path=path, line=e.lineno) from e
    except ValueError as e:  # null bytes
        raise TaskError(f"cannot parse: {e}", path=path) from e


def top_level_names(tree: ast.Module) -> dict[str, int]:
    """Names bound at module level (classes, functions, assignments, imports) and their lines.
    Names bound under a module-level `if`/`try` (version switches) count too."""
    names: dict[str, int] = {}

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                names.setdefault(node.name, node.lineno)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    for n in ast.walk(t):
                        if isinstance(n, ast.Name):
                            names.setdefault(n.id, node.lineno)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    names.setdefault((alias.asname or alias.name).split(".")[0], node.lineno)
            elif isinstance(node, ast.If):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                visit(node.orelse)
                visit(node.finalbody)
                for h in node.handlers:
                    visit(h.body)

    visit(tree.body)
    return names


def check_task(source: str, path: str) -> ast.Module:
    """Parse a task and make sure it defines Model, get_inputs and get_init_inputs."""
    tree = parse(source, path)
    names = top_level_names(tree)
    missing = [n for n in TASK_REQUIRED if n not in names]
    if missing:
        raise TaskError(
            f"not a KernelBench task: it does not define {', '.join(missing)} "
            "(a task needs class Model(nn.Module), get_inputs() and get_init_inputs())",
            path=path,
            line=1,
        )
    return tree


def check_candidate(source: str, path: str) -> ast.Module:
    """Parse a candidate and make sure it defines ModelNew."""
    tree = parse(source, path)
    if "ModelNew" not in top_level_names(tree):
        raise TaskError(
            "the candidate does not define ModelNew (a class taking the task's init arguments "
            "whose forward launches @triton.jit kernels)",
            path=path,
            line=1,
        )
    return tree


def read_source(path: str | Path) -> str:
    """A file's text, or a `TaskError` that says why it cannot be read. Only a regular file of
    at most MAX_SOURCE_BYTES is read: a FIFO or a device (/dev/zero) would hang or fill memory."""
    p = Path(path)
    try:
        st = p.stat()
        if not stat.S_ISREG(st.st_mode):
            kind = (
                "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file (a FIFO, socket or device)"
            )
            raise TaskError(f"{kind}; give the path of a Python source file", path=str(p))
        if st.st_size > MAX_SOURCE_BYTES:
            raise TaskError(
                f"{st.st_size} bytes, over the {MAX_SOURCE_BYTES // 1024**2} MiB a source file may have",
                path=str(p),
            )
        return p.read_text(encoding="utf-8")
    except FileNotFoundError as e:
        raise TaskError("no such file", path=str(p)) from e
    except (OSError, UnicodeDecodeError) as e:
        raise TaskError(f"cannot read: {e}", path=str(p)) from e


MAX_SOURCE_BYTES = 16 * 1024**2


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
