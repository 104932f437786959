"""The intake: a task's and a candidate's source read, parsed and checked once, before any process starts.

A task is a KernelBench problem file (`Model`, `get_inputs`, `get_init_inputs`, optionally
`get_input_sets`, `get_cpu_inputs`, `get_cpu_input_sets`); a candidate defines `ModelNew`.
`read_source` reads a file (a regular file of at most `MAX_SOURCE_BYTES`); `task_source` /
`candidate_source` parse the text with `ast` and raise `TaskError` naming the file and line, so
the CLI exits 2 at once; `take_in(job)` does both for an `EvalJob` and runs the static rules
(`static.py`) over the candidate.

Once: a source's check is kept (by its text and name, the last `KEPT_SOURCES` sources of at most
`KEPT_BYTES` each), so the command line's check before it starts the evaluator, and every step
of a search that submits the same task again, parse it once. The static rules run at each
`take_in` (a candidate's own imported modules are files that may change). A kept `Source`'s tree
is shared: read it, never change it.

Smaller inputs in the interpreter: a task may define `get_cpu_inputs()` (and
`get_cpu_input_sets()`) returning shapes small enough for Triton's CPU interpreter; the engine
uses them instead of `get_inputs()` / `get_input_sets()` when it runs without a GPU. KernelBench
files, which have neither, run unchanged with their own shapes. Workers import a source by path
(`worker/common.import_source`).
"""

from __future__ import annotations

import ast
import functools
import stat
from dataclasses import dataclass
from pathlib import Path

from kernelcraft.base.errors import TaskError
from kernelcraft.engine.source.static import Finding, check_candidate_source
from kernelcraft.schema.evaluation import EvalJob

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
    except (RecursionError, MemoryError):
        raise too_deep(path) from None


def too_deep(path: str) -> TaskError:
    """A module whose expressions nest deeper than Python's parser or our checks can follow."""
    return TaskError(
        "nested too deeply to read (an expression or a nesting of thousands of levels); "
        "split it into statements",
        path=path,
    )


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


def _check_task(source: str, path: str) -> ast.Module:
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


def _check_candidate(source: str, path: str) -> ast.Module:
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


# A kept check: this many sources, each of at most this many bytes (a larger one is parsed each
# time: its tree is not worth the memory).
KEPT_SOURCES = 32
KEPT_BYTES = 256 * 1024


@dataclass(frozen=True)
class Source:
    """A source's text, its name (a path, for messages) and its module, parsed and checked."""

    text: str
    name: str
    tree: ast.Module


@functools.lru_cache(maxsize=KEPT_SOURCES)
def _kept(kind: str, text: str, name: str) -> Source:
    check = _check_task if kind == "task" else _check_candidate
    return Source(text, name, check(text, name))


def _checked(kind: str, text: str, name: str) -> Source:
    try:
        if len(text) > KEPT_BYTES:
            check = _check_task if kind == "task" else _check_candidate
            return Source(text, name, check(text, name))
        return _kept(kind, text, name)
    except RecursionError:  # a tree the parser built but a check cannot walk
        raise too_deep(name) from None


def task_source(text: str, name: str) -> Source:
    """A task's source, parsed and checked (Model, get_inputs, get_init_inputs), or a `TaskError`."""
    return _checked("task", text, name)


def candidate_source(text: str, name: str) -> Source:
    """A candidate's source, parsed and checked (ModelNew), or a `TaskError`."""
    return _checked("candidate", text, name)


def check_task(source: str, path: str) -> ast.Module:
    """`task_source`'s tree: parse a task and make sure it defines Model, get_inputs and get_init_inputs."""
    return task_source(source, path).tree


def check_candidate(source: str, path: str) -> ast.Module:
    """`candidate_source`'s tree: parse a candidate and make sure it defines ModelNew."""
    return candidate_source(source, path).tree


@dataclass(frozen=True)
class Intake:
    """A job's sources, checked: the task, the candidate (None for a baseline-only job) and the
    static rules' findings over it, in source order (empty: nothing forbidden)."""

    task: Source
    candidate: Source | None
    findings: tuple[Finding, ...]


def take_in(job: EvalJob) -> Intake:
    """Check a job's task and candidate (each parsed once, see the module's docstring) and run
    the static rules over the candidate; a `TaskError` for a source that is not a task or a
    candidate."""
    task = task_source(job.task_source, job.task_name)
    if job.baseline_only:  # no candidate: nothing of one to check
        return Intake(task, None, ())
    candidate = candidate_source(job.candidate_source, job.candidate_name)
    try:
        findings = tuple(check_candidate_source(candidate.tree))
    except RecursionError:
        raise too_deep(job.candidate_name) from None
    return Intake(task, candidate, findings)
