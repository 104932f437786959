"""What the tools take: the annotated input types their schemas show, and the checks a schema
cannot express (`allowed_op_names`).

Shared by the tool handlers (`tools/`); every `Field(description=...)` here is read by the model
that calls the tool, so it says what to pass and in which form.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from kernelcraft.base.errors import UsageError
from kernelcraft.base.knobs import TIMEOUT_S, TRIALS
from kernelcraft.base.ops import aten_op_names
from kernelcraft.base.targets import TARGET_LIST

ReferenceCode = Annotated[
    str,
    Field(
        min_length=1,
        description="The task: a KernelBench module (Model, get_inputs, get_init_inputs).",
    ),
]
CandidateCode = Annotated[
    str,
    Field(
        min_length=1,
        description="Your kernel: class ModelNew (Model's __init__ arguments) launching @triton.jit kernels.",
    ),
]
Arch = Annotated[
    str | None,
    Field(
        description=f"{TARGET_LIST}, nvidia or amd; omit for any.",
    ),
]

DEFAULT_TIMEOUT_S = TIMEOUT_S.default
Timeout = Annotated[float, TIMEOUT_S.constraint()]
DEFAULT_TRIALS = int(TRIALS.default)
Trials = Annotated[int, TRIALS.constraint()]
AllowedOps = Annotated[
    list[str] | None,
    Field(
        description="Aten ops forward() may run ('mm', 'aten::mm'; no wildcards); others are "
        "'pytorch_fallback'.",
    ),
]
EvalMode = Annotated[
    bool,
    Field(description="Both models in eval mode (default: training, as in KernelBench)."),
]
# SQLite stores 64-bit signed integers: a larger id or seed could never name a row and would fail
# deep in the driver, so the schema bounds them and the client hears which field and what range.
MAX_INT64 = 2**63 - 1


def allowed_op_names(ops: list[str] | None) -> list[str]:
    """`base.ops.aten_op_names` for a tool: a bad name is a ToolError listing the accepted forms."""
    try:
        return aten_op_names(ops)
    except UsageError as e:
        raise ToolError(str(e)) from None


def client_folder(value: str | None, name: str, *, must_exist: bool) -> Path:
    """A folder a client named, as an absolute path on the server's machine.

    Refuses (ToolError) an empty value and a relative path: either would resolve against the
    server's working directory (an assistant's user's project), which the client never named, so
    a tool could read every `.py` there as a task or write its results there. `~` is the server's
    user's home. `must_exist`: a folder to read from, which must be one.
    """
    text = (value or "").strip()
    if not text:
        raise ToolError(f"{name} is empty; pass an absolute folder path on the server's machine")
    path = Path(text).expanduser()
    if not path.is_absolute():
        raise ToolError(
            f"{name} {text!r} is relative; pass an absolute folder path on the server's machine "
            "(a relative one would resolve against the server's working directory, not a folder you named)"
        )
    if must_exist and not path.is_dir():
        raise ToolError(f"{name} {text!r} is not a folder on the server's machine; pass one that exists")
    if not must_exist and path.exists() and not path.is_dir():
        raise ToolError(f"{name} {text!r} is a file, not a folder; pass a folder for the results")
    return path
