"""A compiled kernel's resource use in words (issue 29: profiles that say why): registers, spills,
shared memory, warps, occupancy and what its `tl.dot` ran on, with what to change where that is a
slow path. Shared by the profile (`ProfileResult.why`) and a search step's feedback.
"""

from __future__ import annotations

from kernelcraft.base.occupancy import describe as describe_occupancy
from kernelcraft.base.occupancy import occupancy
from kernelcraft.base.targets import find
from kernelcraft.schema.evaluation import CompileResult, KernelCompileInfo, ProfileResult


def dots_words(dots: str | None, target: str) -> str | None:
    """A kernel's `dots` (KernelCompileInfo) in words, with what to change where it is a slow path."""
    if dots is None:
        return None
    if dots == "fma":
        return (
            "its tl.dot runs on CUDA cores, not tensor cores (fp32 operands with "
            "input_precision='ieee'; 'tf32x3' is near-fp32 on tensor cores)"
        )
    known = find(target)
    path = known.tensor_core_path if known is not None else dots
    if dots == "mma.sync" and path in ("wgmma", "tcgen05"):
        return (
            f"its tl.dot runs as mma.sync, the pre-Hopper path ({path} needs num_warps a multiple "
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


def roofline_words(prof: ProfileResult | None) -> str | None:
    """How close a timed kernel runs to its roofline floor, and the floor's terms: '54% of the
    roofline floor (compute-bound: 416.7 µs, bf16x3 at 330 TFLOP/s, the fastest precision within
    rtol 1e-4; 165.0 TFLOP/s achieved)'. None for a profile without a fraction (no GPU, rejected)."""
    if (
        prof is None
        or prof.roofline is None
        or prof.roofline_fraction is None
        or prof.failure_class is not None
    ):
        return None
    r = prof.roofline
    if r.bound == "memory":
        terms = f"memory-bound: {r.floor_us:.1f} µs at {r.peak_gbps:.0f} GB/s"
        if prof.achieved_gbps:
            terms += f"; {prof.achieved_gbps:.0f} GB/s achieved"
    else:
        within = f", the fastest precision within rtol {r.rtol:g}" if r.rtol is not None else ""
        terms = f"compute-bound: {r.floor_us:.1f} µs, {r.precision} at {r.peak_tflops:.0f} TFLOP/s{within}"
        if prof.achieved_tflops:
            terms += f"; {prof.achieved_tflops:.1f} TFLOP/s achieved"
    return f"{prof.roofline_fraction:.0%} of the roofline floor ({terms})"
