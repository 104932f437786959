"""What the tools take: the annotated input types their schemas show, and the checks a schema
cannot express (`allowed_op_names`).

Shared by the tool handlers (`tools.py`); every `Field(description=...)` here is read by the model
that calls the tool, so it says what to pass and in which form.
"""

from __future__ import annotations

import re
from typing import Annotated

from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

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
        description="sm_80, sm_89, sm_90a, sm_100, gfx942, nvidia or amd; omit for any.",
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
        description="Aten ops forward() may run ('mm', 'aten::mm', 'aten.mm.default'; no wildcards); any "
        "other is a 'pytorch_fallback'.",
    ),
]
# SQLite stores 64-bit signed integers: a larger id or seed could never name a row and would fail
# deep in the driver, so the schema bounds them and the client hears which field and what range.
MAX_INT64 = 2**63 - 1

# The fallback guard (engine/guard.py) compares aten overload-packet names without the namespace:
# 'mm' for aten.mm.default. A client may name an op in any of these forms.
_OP_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
ACCEPTED_OP_FORMS = "'mm', 'aten::mm', 'aten.mm', 'aten::mm.default' or 'aten.mm.default'"


def allowed_op_names(ops: list[str] | None) -> list[str]:
    """The names the fallback guard compares ('mm'), from any accepted form; a ToolError listing
    the accepted forms for anything else ('*', 'torch.mm'), so no allowance is silently dropped."""
    names: list[str] = []
    for op in ops or []:
        name = _op_name(op.strip())
        if name is None:
            raise ToolError(
                f"allowed_ops: {op!r} is not an aten op name; name each op as {ACCEPTED_OP_FORMS} "
                "(no wildcards: allowing every op would switch off the PyTorch-fallback check)"
            )
        if name not in names:
            names.append(name)
    return names


def _op_name(op: str) -> str | None:
    for prefix in ("aten::", "aten."):
        if op.startswith(prefix):
            packet, _, overload = op.removeprefix(prefix).partition(".")
            well_formed = _OP_NAME.fullmatch(packet) and (not overload or _OP_NAME.fullmatch(overload))
            return packet if well_formed else None
    return op if _OP_NAME.fullmatch(op) else None
