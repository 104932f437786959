"""What the tools take: the annotated input types their schemas show, and the checks a schema
cannot express (`allowed_op_names`).

Shared by the tool handlers (`tools.py`); every `Field(description=...)` here is read by the model
that calls the tool, so it says what to pass and in which form.
"""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from kernelcraft.base.errors import UsageError
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

DEFAULT_TIMEOUT_S = 120.0
Timeout = Annotated[
    float,
    Field(
        gt=0,
        le=600,
        description="Seconds the whole evaluation may take; then its worker is killed.",
    ),
]
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
