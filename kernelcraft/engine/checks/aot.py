"""Ahead-of-time compilation of intercepted launches for GPUs that are not here.

`compile_launch(record, "sm_90a")` compiles exactly the specialisation a candidate launched (its
argument types, alignment, constexprs, num_warps, num_stages) with `triton.compile` for the named
target, with no GPU or driver present, and reports the kernel's resource use:

- NVIDIA: registers and local memory from the cubin (`cuobjdump --dump-resource-usage`, shipped
  in Triton's wheel under `triton/backends/nvidia/bin`); `spills` is local memory per thread / 4,
  the same figure Triton's `CompiledKernel.n_spills` reports on a GPU (CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES
  / 4); shared memory is Triton's `metadata.shared` (dynamic shared memory of the launch).
- AMD: VGPRs, SGPRs, spills and LDS from the AMDGCN assembly's kernel descriptor
  (`.vgpr_count`, `.sgpr_count`, `.vgpr_spill_count` + `.sgpr_spill_count`,
  `.group_segment_fixed_size`).

Shared memory beyond the target's per-block limit is a compile failure here, as it is when Triton
loads the kernel on a real GPU (`OutOfResources`), so the verdict does not depend on a GPU being
present. A failure raises `AotCompileError` with the compiler's own text (MLIR diagnostics that
Triton prints on file descriptor 2 are captured) and a `FailureClass`.

Compile in a process where Triton was imported WITHOUT `TRITON_INTERPRET=1`. Under the
interpreter, `@triton.jit` (in the candidate and in `triton.language`'s own helpers) makes
interpreter objects, and Triton's frontend fails on ordinary kernels (measured on 3.6 and 3.9:
`rm[:, None]` → "'value' object has no attribute 'data'", and every later compile in the process
fails too). `compile_launch` refuses such records with `InterpretedKernelError`. Discovery with
`intercept_launches(execute=False)` needs no GPU, so the compile worker never needs the flag.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from kernelcraft.base.errors import KernelcraftError
from kernelcraft.base.failures import FailureClass, classify
from kernelcraft.base.targets import facts
from kernelcraft.engine.watch.records import LaunchRecord, specialize
from kernelcraft.schema.evaluation import KernelCompileInfo, TargetCompileResult


@dataclass(frozen=True)
class TargetSpec:
    """What the compiler needs of a target, read from the target registry (`base/targets.py`)."""

    name: str
    backend: str  # "cuda" or "hip"
    arch: int | str
    warp_size: int
    max_shared_bytes: int
    """Largest shared memory (LDS) one block may use (the registry's `max_shared_per_block`)."""


def target_spec(target: str) -> TargetSpec:
    """The spec of a target by name or alias (`base/targets.py`); UsageError for an unknown one."""
    t = facts(target)
    return TargetSpec(t.name, t.backend, t.arch, t.warp_size, t.max_shared_per_block)


class InterpretedKernelError(KernelcraftError):
    """The launch was recorded in a process running Triton's interpreter: a fault of the caller."""


class AotCompileError(KernelcraftError):
    """A kernel did not compile for a target. A verdict about the candidate, not a fault of ours:
    callers put `error_text` and `failure_class` into the result."""

    def __init__(self, kernel: str, target: str, error_text: str) -> None:
        self.kernel = kernel
        self.target = target
        self.error_text = error_text.strip()
        self.failure_class: FailureClass = classify(self.error_text, "compile")
        summary = " | ".join(line.strip() for line in self.error_text.splitlines() if line.strip())
        super().__init__(f"{kernel} does not compile for {target}: {summary[:400]}")


_MAX_ERROR_CHARS = 4000


@contextlib.contextmanager
def _capture_fds() -> Iterator[list[str]]:
    """Capture what the compiler writes on fds 1 and 2 (MLIR diagnostics, ptxas dumps)."""
    out: list[str] = []
    sys.stdout.flush()
    sys.stderr.flush()
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        saved = [os.dup(1), os.dup(2)]
        try:
            os.dup2(tmp.fileno(), 1)
            os.dup2(tmp.fileno(), 2)
            yield out
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
            tmp.seek(0)
            out.append(tmp.read().decode("utf-8", "replace"))


def _error_text(exc: BaseException, captured: str) -> str:
    text = f"{type(exc).__name__}: {exc}"
    # ptxas failures echo the whole PTX source after the error; keep the diagnostic lines only.
    captured = re.sub(r"\n={20,}.*?={20,}\n", "\n", captured, flags=re.DOTALL)
    useful = [
        line for line in captured.splitlines() if line.strip() and "please share the reproducer" not in line
    ]
    if useful:
        text = "\n".join(useful[-60:]) + "\n" + text
    return text[-_MAX_ERROR_CHARS:]


def _triton_compile(record: LaunchRecord, spec: TargetSpec) -> Any:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend

    gpu_target = GPUTarget(spec.backend, spec.arch, spec.warp_size)
    backend = make_backend(gpu_target)
    # Argument errors surface at launch on a GPU too; they are the candidate's, like compile errors.
    _bound, options, signature, constexprs, attrs = specialize(
        record.jit_fn, backend, record.args, record.kwargs
    )
    source = ASTSource(record.jit_fn, signature, constexprs, attrs)
    return triton.compile(source, target=gpu_target, options=options.__dict__)


def compile_launch(record: LaunchRecord, target: str) -> KernelCompileInfo:
    """Compile one recorded launch for `target` and report its resource use.

    Raises `AotCompileError` (with the compiler's text and a failure class) when the kernel does
    not compile or needs more shared memory than the target has, `UsageError` for an unknown target.
    """
    spec = target_spec(target)
    name = record.launch.name
    if record.interpreted:
        raise InterpretedKernelError(
            f"{name} was decorated under TRITON_INTERPRET=1 and cannot be compiled ahead of time; "
            "import the candidate in a process without the interpreter flag for the compile stage"
        )
    with _capture_fds() as captured:
        try:
            compiled = _triton_compile(record, spec)
        except Exception as e:  # noqa: BLE001 - any compiler exception is the candidate's verdict
            failure: BaseException | None = e
        else:
            failure = None
    if failure is not None:
        raise AotCompileError(name, spec.name, _error_text(failure, "".join(captured))) from failure
    info = _resource_usage(compiled, spec)
    info.name = name
    info.constexprs = dict(record.launch.constexprs)
    if info.shared_bytes is not None and info.shared_bytes > spec.max_shared_bytes:
        raise AotCompileError(
            name,
            spec.name,
            f"out of resources: shared memory, Required: {info.shared_bytes}, "
            f"Hardware limit: {spec.max_shared_bytes} bytes per block on {spec.name}. "
            "Reducing block sizes or `num_stages` may help.",
        )
    return info


def _resource_usage(compiled: Any, spec: TargetSpec) -> KernelCompileInfo:
    md = compiled.metadata
    info = KernelCompileInfo(
        name=str(getattr(md, "name", "")),
        shared_bytes=int(getattr(md, "shared", 0) or 0),
        num_warps=int(md.num_warps),
        num_stages=int(md.num_stages),
    )
    info.dots = dot_units(compiled.asm)
    if spec.backend == "hip":
        fields = _amdgcn_fields(compiled.asm.get("amdgcn", ""))
        info.registers = fields.get("vgpr_count")
        info.sgprs = fields.get("sgpr_count")
        if "vgpr_spill_count" in fields or "sgpr_spill_count" in fields:
            info.spills = fields.get("vgpr_spill_count", 0) + fields.get("sgpr_spill_count", 0)
        lds = fields.get("group_segment_fixed_size")
        if lds is not None:
            info.shared_bytes = max(info.shared_bytes or 0, lds)
    else:
        usage = cubin_resource_usage(compiled.asm["cubin"])
        info.registers = usage.get("REG")
        if "LOCAL" in usage:
            info.spills = usage["LOCAL"] // 4
    return info


def dot_units(asm: dict[str, Any]) -> str | None:
    """What a compiled kernel's `tl.dot`s run on, from its Triton IR and assembly: `wgmma`
    (Hopper's warpgroup MMA), `mma.sync` (the Ampere-style MMA: on Hopper, the slower path),
    `mfma` (AMD's matrix cores) or `fma` (no matrix unit: an fp32 dot with input_precision="ieee",
    or a tile the MMA does not take). None: the kernel has no dot."""
    ttir = asm.get("ttir", "")
    if not isinstance(ttir, str) or "tt.dot" not in ttir:
        return None
    ptx = asm.get("ptx", "")
    amdgcn = asm.get("amdgcn", "")
    if isinstance(ptx, str) and "wgmma.mma_async" in ptx:
        return "wgmma"
    if isinstance(ptx, str) and "mma.sync" in ptx:
        return "mma.sync"
    if isinstance(amdgcn, str) and "v_mfma" in amdgcn:
        return "mfma"
    return "fma"


_AMD_FIELD = re.compile(
    r"\.(vgpr_count|sgpr_count|vgpr_spill_count|sgpr_spill_count|group_segment_fixed_size|"
    r"private_segment_fixed_size):\s*(\d+)"
)


def _amdgcn_fields(asm: str) -> dict[str, int]:
    """Resource fields of the (single) kernel in an AMDGCN assembly listing's metadata."""
    fields: dict[str, int] = {}
    for key, value in _AMD_FIELD.findall(asm):
        fields.setdefault(key, int(value))
    return fields


def _nvidia_tool(name: str) -> str:
    import triton

    path = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", name)
    if not os.path.exists(path):
        raise KernelcraftError(f"{name} not found at {path}; reinstall the triton wheel (it ships {name})")
    return path


def cubin_resource_usage(cubin: bytes) -> dict[str, int]:
    """REG, STACK, SHARED, LOCAL, ... of the first function in a cubin, via `cuobjdump`."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        proc = subprocess.run(
            [_nvidia_tool("cuobjdump"), "--dump-resource-usage", f.name],
            capture_output=True,
            text=True,
            timeout=60,
        )
    if proc.returncode != 0:
        raise KernelcraftError(f"cuobjdump could not read the compiled kernel: {proc.stderr.strip()[:500]}")
    for line in proc.stdout.splitlines():
        if "REG:" in line:
            return {k: int(v) for k, v in re.findall(r"([A-Z_]+(?:\[\d+\])?):(\d+)", line)}
    raise KernelcraftError(f"cuobjdump printed no resource usage: {proc.stdout.strip()[:500]}")


def _key(r: LaunchRecord) -> tuple[Any, ...]:
    """A launch's specialisation: the same kernel, types, constexprs, warps and stages."""
    la = r.launch
    return (
        id(r.jit_fn),
        tuple(sorted(la.signature.items())),
        tuple(sorted((k, repr(v)) for k, v in la.constexprs.items())),
        la.num_warps,
        la.num_stages,
    )


def _dedupe(records: Iterable[LaunchRecord]) -> list[LaunchRecord]:
    """One record per distinct specialisation (same kernel, types, constexprs, warps, stages)."""
    seen: dict[tuple[Any, ...], LaunchRecord] = {}
    for r in records:
        seen.setdefault(_key(r), r)
    return list(seen.values())


RESOURCE_CLASSES = frozenset(
    {
        FailureClass.COMPILE_OUT_OF_SHARED_MEMORY,
        FailureClass.COMPILE_OUT_OF_REGISTERS,
        FailureClass.RUNTIME_OUT_OF_RESOURCES,
    }
)
"""What Triton's autotuner survives in one config (`OutOfResources`, ptxas's register errors):
it times such a config as infinitely slow and runs the others."""


def _autotune_groups(records: list[LaunchRecord]) -> list[set[tuple[Any, ...]]]:
    """The specialisations of each autotuner call that had several configs (in record order, a
    call's configs are consecutive, numbered from 0)."""
    groups: list[set[tuple[Any, ...]]] = []
    previous = None
    for r in records:
        if r.autotune_config is None or (r.autotune_configs or 0) < 2:
            previous = None
            continue
        if r.autotune_config == 0 or previous != id(r.jit_fn):
            groups.append(set())
        previous = id(r.jit_fn)
        groups[-1].add(_key(r))
    return groups


def _excused(
    records: list[LaunchRecord], errors: dict[tuple[Any, ...], AotCompileError]
) -> dict[tuple[Any, ...], str]:
    """The failed specialisations Triton's autotuner would drop, with a note each: an autotune
    config that failed for lack of resources, in calls where some config of the same call
    compiled. A call whose every config failed is not excused: nothing would be left to run."""
    excused: dict[tuple[Any, ...], str] = {}
    blamed: set[tuple[Any, ...]] = set()
    for group in _autotune_groups(records):
        left = [k for k in group if k not in errors]
        for k in group & errors.keys():
            if errors[k].failure_class in RESOURCE_CLASSES and left:
                excused[k] = (
                    errors[k].error_text.strip().splitlines()[0][:300] if errors[k].error_text else ""
                )
            else:
                blamed.add(k)
    return {k: why for k, why in excused.items() if k not in blamed}


def _try_compile(
    record: LaunchRecord, target: str
) -> tuple[KernelCompileInfo | None, AotCompileError | None]:
    try:
        return compile_launch(record, target), None
    except AotCompileError as e:
        return None, e


def compile_for_targets(records: Iterable[LaunchRecord], targets: Iterable[str]) -> list[TargetCompileResult]:
    """Compile every distinct recorded launch for every target: one `TargetCompileResult` each.

    A target fails when any of its kernels fails; the first failure's text and class are reported
    and the remaining kernels of that target are still compiled (their infos are kept). As
    Triton's autotuner does, an `@triton.autotune` config that cannot compile for lack of
    resources (shared memory, registers) is dropped with a note when another config of the same
    call compiled (`_excused`); the target fails only when none is left."""
    records = list(records)
    unique = _dedupe(records)
    return [
        _judge(records, unique, spec.name, spec.name, functools.partial(_try_compile, target=spec.name))
        for spec in map(target_spec, targets)
    ]


def _judge(
    records: list[LaunchRecord],
    unique: list[LaunchRecord],
    target: str,
    where: str,
    compile_one: Callable[[LaunchRecord], tuple[KernelCompileInfo | None, AotCompileError | None]],
) -> TargetCompileResult:
    """Compile each distinct launch with `compile_one` and judge the target (ahead of time or
    this GPU's JIT alike): it fails on the first error that no other `@triton.autotune` config of
    the same call excuses (`_excused`: dropped, with a note naming `where`), or when nothing was
    launched; the kernels that compiled are kept either way."""
    start = time.perf_counter()
    kernels: list[KernelCompileInfo] = []
    errors: dict[tuple[Any, ...], AotCompileError] = {}
    for r in unique:
        info, error = compile_one(r)
        if info is not None:
            kernels.append(info)
        if error is not None:
            errors[_key(r)] = error
    excused = _excused(records, errors)
    first_error = next((e for k, e in errors.items() if k not in excused), None)
    notes = [
        f"{errors[k].kernel}: an @triton.autotune config ({_constexprs(k)}) does not fit {where} "
        f"and is dropped, as Triton's autotuner drops it; the other configs run ({why})"
        for k, why in excused.items()
    ]
    return TargetCompileResult(
        target=target,
        ok=first_error is None and bool(unique),
        kernels=kernels,
        error=(f"{first_error.kernel}: {first_error.error_text}" if first_error else None)
        or (None if unique else "no Triton kernel was launched"),
        failure_class=(first_error.failure_class if first_error else None)
        or (None if unique else FailureClass.NO_TRITON_LAUNCH),
        seconds=round(time.perf_counter() - start, 3),
        notes=[n[:600] for n in notes[:16]],
    )


def _constexprs(key: tuple[Any, ...]) -> str:
    """A specialisation's constexprs, warps and stages, as the note names a config."""
    values = [f"{k}={v}" for k, v in key[2]]
    return ", ".join([*values, f"num_warps={key[3]}", f"num_stages={key[4]}"])


def _host_kernel_info(record: LaunchRecord) -> KernelCompileInfo:
    """JIT-compile one recorded launch for the local GPU (`JITFunction.warmup`: compiled and
    cached, not run) and read its resource use from the loaded binary: `n_regs`, `n_spills`
    (set by `_init_handles`, which loads the module) and `metadata.shared`. Triton 3.6 and 3.9."""
    grid = tuple(record.launch.grid) or (1,)
    kernel = record.jit_fn.warmup(*record.args, grid=grid, **record.kwargs)
    init = getattr(kernel, "_init_handles", None)
    if callable(init):
        init()
    md = kernel.metadata
    n_regs = getattr(kernel, "n_regs", None)
    n_spills = getattr(kernel, "n_spills", None)
    return KernelCompileInfo(
        name=record.launch.name,
        registers=int(n_regs) if n_regs is not None else None,
        spills=int(n_spills) if n_spills is not None else None,
        shared_bytes=int(getattr(md, "shared", 0) or 0),
        num_warps=int(md.num_warps),
        num_stages=int(md.num_stages),
        constexprs=dict(record.launch.constexprs),
        dots=dot_units(getattr(kernel, "asm", {}) or {}),
    )


def _try_host(record: LaunchRecord) -> tuple[KernelCompileInfo | None, AotCompileError | None]:
    try:
        return _host_kernel_info(record), None
    except Exception as e:  # noqa: BLE001 - a compile error of the candidate's kernel is a verdict
        import traceback

        text = "".join(traceback.format_exception_only(type(e), e))
        return None, AotCompileError(record.launch.name, "host", text)


def compile_host(records: Iterable[LaunchRecord]) -> TargetCompileResult:
    """The real JIT compile of every distinct recorded launch on this process's GPU, as the
    `TargetCompileResult` with target "host" (CUDA workers only; the kernels do not run). An
    autotune config out of resources is dropped with a note, as in `compile_for_targets`."""
    records = list(records)
    return _judge(records, _dedupe(records), "host", "this GPU", _try_host)
