"""The errors kernelcraft raises on purpose.

A candidate kernel that fails is not an error of ours: it is a verdict with a failure class
(`kernelcraft.base.failures.FailureClass`). These exceptions are for unusable input and for
faults of the tool itself. Each message says what happened and what to do about it. The CLI maps
`UsageError` to exit code 2 (and any other `KernelcraftError` to 1); the MCP server turns any `KernelcraftError` into a `ToolError`.
"""

from __future__ import annotations


class KernelcraftError(Exception):
    """Base of every error kernelcraft raises on purpose."""


class UsageError(KernelcraftError):
    """The caller gave something unusable: a missing file, a bad argument, an unknown target."""


class TaskError(UsageError):
    """A task or candidate module cannot be used (syntax error, missing Model/ModelNew, ...).

    `path` and `line` point at the offending file and line when they are known.
    """

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None) -> None:
        where = ""
        if path is not None:
            where = f"{path}:{line}: " if line is not None else f"{path}: "
        super().__init__(f"{where}{message}")
        self.path = path
        self.line = line


class StoreError(KernelcraftError):
    """The database cannot be opened or used (corrupt, foreign, read-only, disk full)."""


class NotFoundError(UsageError):
    """A named object (tree, node, rule, document section) does not exist."""


class BudgetError(UsageError):
    """A search tree's budget is spent, or a run's token or dollar budget is."""


class LLMError(KernelcraftError):
    """An LLM backend cannot be used (unreachable server, refused request, rejected key)."""


class LLMSetupError(UsageError, LLMError):
    """The LLM's settings are unusable before any call: a missing API key, no model name. A usage
    error (exit 2), caught before any work starts."""


class InfrastructureError(KernelcraftError):
    """The evaluation machinery failed under a job (a Ray node or actor died, a worker pool could
    not start): no verdict on the candidate was reached, and the job may be submitted again."""


class StalledError(InfrastructureError):
    """A wait ran past its bound: a tool call that did not answer, an evaluation the evaluator did
    not finish, the database held by another request. The message names the wait and its bound."""
