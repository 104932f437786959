"""Names of the PyTorch ops a caller allows a candidate's forward to run (`--allow-op`, the tools'
`allowed_ops`): every accepted spelling mapped onto the name the fallback guard compares.

The guard (`engine/watch/guard.py`) compares aten overload-packet names without the namespace: 'mm'
for aten.mm.default. A caller may name an op in any of `ACCEPTED_OP_FORMS`; anything else (a
wildcard, 'torch.mm') is refused rather than silently dropped.
"""

from __future__ import annotations

import re

from kernelcraft.base.errors import UsageError

_OP_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
ACCEPTED_OP_FORMS = "'mm', 'aten::mm', 'aten.mm', 'aten::mm.default' or 'aten.mm.default'"


def aten_op_names(ops: list[str] | None, what: str = "allowed_ops") -> list[str]:
    """The names the fallback guard compares ('mm'), each once, from any accepted form; a
    `UsageError` naming `what` and listing the accepted forms for anything else."""
    names: list[str] = []
    for op in ops or []:
        name = _op_name(op.strip())
        if name is None:
            raise UsageError(
                f"{what}: {op!r} is not an aten op name; name each op as {ACCEPTED_OP_FORMS} "
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
