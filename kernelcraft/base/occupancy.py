"""How many warps of a kernel an SM can hold at once, from its compiled resource use (issue 29:
profiles that say why). The CUDA occupancy calculation for NVIDIA targets: blocks per SM limited by
registers (allocated per warp in units of 256), shared memory, warps and the block limit; AMD
targets are left out (None).

The SM limits are the target registry's (`base/targets.py`). Pure arithmetic: the compile stage's registers, shared memory and warps go in, a fraction and the
resource that limits it come out.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernelcraft.base.targets import find

REGISTER_UNIT = 256  # registers are allocated to a warp in units of this many


@dataclass(frozen=True)
class Occupancy:
    fraction: float
    """Resident warps over the SM's maximum."""
    limited_by: str
    """'registers', 'shared memory', 'warps' or 'blocks'."""


def occupancy(
    target: str, registers: int | None, shared_bytes: int | None, num_warps: int | None
) -> Occupancy | None:
    """The occupancy of a kernel on `target`, or None where the target or the figures are unknown."""
    known = find(target)
    limits = known.sm if known is not None else None
    if limits is None or not num_warps or registers is None:
        return None
    per_warp = -(-max(registers, 1) * 32 // REGISTER_UNIT) * REGISTER_UNIT
    by = {  # on a tie, the first named is the one reported
        "warps": limits.warps // num_warps,
        "blocks": limits.blocks,
        "registers": limits.registers // (per_warp * num_warps),
    }
    if shared_bytes:
        by["shared memory"] = limits.shared_bytes // (shared_bytes + 1024)
    limited_by = min(by, key=lambda k: by[k])
    blocks = by[limited_by]
    return Occupancy(min(1.0, blocks * num_warps / limits.warps), limited_by)


def describe(occ: Occupancy | None) -> str:
    """'occupancy 50% (limited by registers)', or '' when unknown."""
    if occ is None:
        return ""
    return f"occupancy {occ.fraction:.0%} (limited by {occ.limited_by})"
