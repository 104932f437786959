"""A compiled kernel's resource use in words (issue 29: profiles that say why): registers, spills,
shared memory, warps, occupancy and what its `tl.dot` ran on, with what to change where that is a
slow path. Shared by the profile (`ProfileResult.why`) and a search step's feedback.
"""

from __future__ import annotations

from kernelcraft.base.evaluation import CompileResult, KernelCompileInfo
from kernelcraft.base.occupancy import describe as describe_occupancy
from kernelcraft.base.occupancy import occupancy


def dots_words(dots: str | None, target: str) -> str | None:
    """A kernel's `dots` (KernelCompileInfo) in words, with what to change where it is a slow path."""
    if dots is None:
        return None
    if dots == "fma":
        return (
            "its tl.dot runs on CUDA cores, not tensor cores (fp32 operands with "
            "input_precision='ieee'; 'tf32x3' is near-fp32 on tensor cores)"
        )
    if dots == "mma.sync" and target.startswith(("sm_90", "sm_100")):
        return (
            "its tl.dot runs as mma.sync, the pre-Hopper path (wgmma needs num_warps a multiple "
            "of 4 and a tile whose rows are a multiple of 64)"
        )
    return f"its tl.dot runs as {dots}"


def resources(registers: int | None, spills: int | None, shared: int | None, warps: int | None) -> str:
    out = []
    if spills:
        out.append(f"spills {spills} registers")
    if registers is not None:
        out.append(f"{registers} registers per thread")
    if shared:
        out.append(f"{shared / 1024:.0f} KiB shared memory")
    if warps is not None:
        out.append(f"{warps} warps")
    return ", ".join(out)


def kernel_words(k: KernelCompileInfo, target: str) -> str:
    """One compiled kernel's resources, occupancy and dot unit on `target`, in words ('' if none)."""
    use = resources(k.registers, k.spills, k.shared_bytes, k.num_warps)
    occ = describe_occupancy(occupancy(target, k.registers, k.shared_bytes, k.num_warps))
    return ", ".join(x for x in (use, occ, dots_words(k.dots, target)) if x)


def compiled_words(result: CompileResult | None, target: str) -> list[str]:
    """'kernel NAME on TARGET: ...' for each kernel compiled for `target` (else for the first target
    that compiled)."""
    if result is None:
        return []
    ok = [t for t in result.targets if t.ok]
    chosen = next((t for t in ok if t.target == target), ok[0] if ok else None)
    if chosen is None:
        return []
    lines = []
    for k in chosen.kernels:
        words = kernel_words(k, chosen.target)
        if words:
            lines.append(f"kernel {k.name} on {chosen.target}: {words}")
    return lines
