"""KernelEvolve's feedback for a step: a kernel's profile in words, and the hardware-manual sections
most relevant to the kernel's operations and its last failure.

Pure functions over a verdict (`EvalResult`) and sources, plus one read of the manuals' index
(`HwDocs`). `describe_step` puts both into the step's fields and its instructions when the tree's
configuration asks for them (`profile_feedback`, `manual_sections`).
"""

from __future__ import annotations

import re

from kernelcraft.base.failures import FailureClass, diagnosis
from kernelcraft.knowledge.docs import HwDocs
from kernelcraft.schema.docs import DocSection
from kernelcraft.schema.evaluation import EvalResult
from kernelcraft.schema.kernelwords import kernel_words, roofline_words

# Triton calls every kernel makes: they say nothing about which manual section helps.
_COMMON_TL = frozenset(
    "load store arange program_id num_programs cdiv constexpr zeros full where multiple_of "
    "max_contiguous static_assert static_print device_print to float32 float16 bfloat16 int32 int64".split()
)
# What a kind of operation, failure or profile is called in the manuals' headings.
_TOPIC_WORDS = {
    "dot": "tl.dot tensor core tile matmul",
    "atomic_add": "atomics",
    "atomic_max": "atomics",
    "atomic_cas": "atomics",
    "make_block_ptr": "block pointers tensor descriptors TMA",
    "make_tensor_descriptor": "block pointers tensor descriptors TMA",
    "sum": "reductions",
    "max": "reductions",
    "min": "reductions",
    "reduce": "reductions",
    "cumsum": "reductions scans",
    "exp": "softmax online reductions",
    "softmax": "softmax online reductions",
    "matmul": "matmul tile tensor core",
    "linear": "matmul tile tensor core",
    "conv2d": "tile im2col",
    "layer_norm": "reductions Welford",
    "layernorm": "reductions Welford",
}
_FAILURE_WORDS = {
    FailureClass.COMPILE_ARANGE_NOT_POW2: "tl.arange power-of-two block shapes",
    FailureClass.COMPILE_NOT_CONSTEXPR: "tl.constexpr meta-parameters",
    FailureClass.COMPILE_DOT: "tl.dot shapes dtypes",
    FailureClass.COMPILE_UNKNOWN_API: "constructs that fail dtypes math functions",
    FailureClass.COMPILE_UNSUPPORTED: "constructs that fail control flow",
    FailureClass.COMPILE_OUT_OF_SHARED_MEMORY: "shared memory per block occupancy num_stages",
    FailureClass.COMPILE_OUT_OF_REGISTERS: "registers occupancy",
    FailureClass.RUNTIME_ILLEGAL_MEMORY_ACCESS: "masks out-of-bounds accesses int64 offsets",
    FailureClass.RUNTIME_MISALIGNED_ADDRESS: "pointer arithmetic strides",
    FailureClass.RUNTIME_OUT_OF_RESOURCES: "occupancy registers shared memory num_warps",
    FailureClass.NUMERICAL_MISMATCH: "precision TF32 fp32 accumulation",
    FailureClass.NAN_OR_INF: "precision masks other=",
}
_TL_CALL = re.compile(r"\btl\.(?:math\.)?([a-z_0-9]+)\s*\(")
_TORCH_CALL = re.compile(r"\b(?:torch|F|nn|torch\.nn\.functional)\.([A-Za-z_0-9]+)\s*\(")
# The failure's first words only: fts_query keeps 24 terms, and the operations need some.
MAX_ERROR_WORDS = 12


def operations(task_source: str, code: str | None) -> list[str]:
    """The operations a kernel performs, as named in its source (Triton) and its task (PyTorch),
    the ones every kernel has left out; first-seen order."""
    seen: dict[str, None] = {}
    for name in _TL_CALL.findall(code or ""):
        if name not in _COMMON_TL:
            seen.setdefault(name, None)
    for name in _TORCH_CALL.findall(task_source):
        seen.setdefault(name.lower(), None)
    return list(seen)


def manual_query(
    task_source: str,
    code: str | None,
    *,
    failure_class: FailureClass | None = None,
    error: str | None = None,
    bound: str | None = None,
    spills: bool = False,
) -> str:
    """Words to search the manuals with: the last failure first (what went wrong matters most),
    then the kernel's operations, then what its profile says bounds it."""
    parts: list[str] = []
    if failure_class is not None:
        parts.append(_FAILURE_WORDS.get(failure_class, failure_class.value.replace("_", " ")))
    if error:
        words = diagnosis(error).split()
        parts.append(" ".join(words[:MAX_ERROR_WORDS]))
    parts.extend(_TOPIC_WORDS.get(op, op) for op in operations(task_source, code))
    if bound == "memory":
        parts.append("memory bandwidth coalescing vector loads")
    elif bound == "compute":
        parts.append("tensor core throughput")
    if spills:
        parts.append("registers occupancy spills")
    return " ".join(parts)


async def manual_sections(docs: HwDocs, query: str, target: str, limit: int) -> list[DocSection]:
    """The `limit` manual sections (for `target`, or for any arch) that best match `query`."""
    if limit < 1 or not query.strip():
        return []
    return await docs.search_hw_docs(query, arch=target, limit=limit)


def bound_of(result: EvalResult | None) -> str | None:
    """'memory' or 'compute' when the verdict's profile has a roofline."""
    if result is None or result.profile is None or result.profile.roofline is None:
        return None
    return result.profile.roofline.bound


def spills_of(result: EvalResult | None) -> bool:
    """Whether a compiled kernel of the verdict spills registers."""
    if result is None or result.compile is None:
        return False
    return any(k.spills for t in result.compile.targets for k in t.kernels)


def profile_words(result: EvalResult | None, target: str) -> str | None:
    """A kernel's profile in words, from its verdict: how close to the roofline it runs and what
    bounds it, then each compiled kernel's registers, spills and shared memory on `target`. None
    when the verdict has neither (no GPU: correctness only)."""
    if result is None:
        return None
    parts: list[str] = []
    prof = result.profile
    roof = roofline_words(prof) if prof is not None and prof.available else None
    if roof is not None:
        parts.append(roof)
    if result.compile is not None:
        for t in result.compile.targets:
            if t.target != target or not t.ok:
                continue
            for k in t.kernels:
                use = kernel_words(k, target)
                if use:
                    parts.append(f"kernel {k.name}: {use}")
    if prof is not None and prof.kernels:
        for side, label in (
            ("candidate", "its GPU time"),
            ("eager", "PyTorch eager's"),
            ("compiled", "torch.compile's"),
        ):
            kernels = prof.kernels.get(side)
            if kernels:
                top = ", ".join(f"{k.name} {k.share:.0%} ({k.us:.1f} µs)" for k in kernels[:3])
                parts.append(f"{label}: {top}")
    if prof is not None and prof.unstable:
        parts.append(f"timing may not repeat within 5% ({prof.unstable})")
    return "; ".join(parts) or None
