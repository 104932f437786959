"""One Triton launch, typed as Triton's own binder types it: what `launches.py` records.

`make_record` turns a launch (the kernel object, its arguments, its grid) into a `LaunchRecord`:
the public `KernelLaunch` (name, argument types, constexprs, grid, num_warps/num_stages) plus the
`JITFunction` and the arguments, so that `checks.aot` can compile the same specialisation for any
target afterwards. Typing uses Triton's binder (`create_function_from_signature` +
`JITFunction._pack_args`, the same in Triton 3.6 and 3.9) with an NVIDIA backend object, which
needs no driver; the type strings ('*fp32', 'i32', 'u1', ...) do not depend on the backend.
Runs in the candidate's worker only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kernelcraft.schema.evaluation import KernelLaunch

# Lazily filled by triton_parts(): importing triton costs ~1 s and this module is imported by the CLI.
_T: dict[str, Any] = {}


def triton_parts() -> dict[str, Any]:
    if not _T:
        from triton import knobs
        from triton.backends.compiler import GPUTarget
        from triton.compiler import make_backend
        from triton.runtime.autotuner import Autotuner, Heuristics
        from triton.runtime.interpreter import InterpretedFunction
        from triton.runtime.jit import JITFunction, create_function_from_signature

        _T.update(
            knobs=knobs,
            GPUTarget=GPUTarget,
            make_backend=make_backend,
            Autotuner=Autotuner,
            Heuristics=Heuristics,
            InterpretedFunction=InterpretedFunction,
            JITFunction=JITFunction,
            create_function_from_signature=create_function_from_signature,
        )
    return _T


@dataclass
class LaunchRecord:
    """One intercepted launch: what the public result shows, plus what AOT compilation needs."""

    launch: KernelLaunch
    jit_fn: Any = field(repr=False)
    """A `triton.runtime.jit.JITFunction` for the kernel (built from the Python function when the
    kernel was an interpreter `InterpretedFunction`: good for typing, not for compiling)."""
    args: tuple[Any, ...] = field(repr=False)
    kwargs: dict[str, Any] = field(repr=False)
    """Positional and keyword arguments of the launch, as `run` received them (constexprs given by
    keyword, autotune config values, num_warps, num_stages, ...)."""
    interpreted: bool = False
    """True when the kernel was decorated while TRITON_INTERPRET=1 was set."""
    autotune_config: int | None = None
    """Index of the autotune config this launch stands for (execute=False records every config)."""
    autotune_configs: int | None = None
    """How many configs the autotuner had after pruning."""
    inside_autotune: bool = False
    """True for launches made by an autotuner (benchmarking runs included, when executing)."""


def kernel_name(fn: Any) -> str:
    inner = getattr(fn, "fn", None)
    return str(getattr(inner, "__name__", None) or getattr(fn, "__name__", None) or repr(fn))


def jit_function_for(fn: Any) -> Any:
    """The `JITFunction` for a launched kernel object (itself, or one built from an
    interpreter `InterpretedFunction`'s Python function with the same decorator options)."""
    t = triton_parts()
    if isinstance(fn, t["JITFunction"]):
        return fn
    if isinstance(fn, t["InterpretedFunction"]):
        cached = fn.__dict__.get("_kernelcraft_jit")
        if cached is None:
            # Used to type arguments only: kernels decorated under the interpreter cannot be
            # compiled (their @jit helpers and triton.language's own are interpreter objects).
            cached = t["JITFunction"](fn.fn, **fn.kwargs)
            fn.__dict__["_kernelcraft_jit"] = cached
        return cached
    raise TypeError(f"not a Triton kernel: {fn!r}")


def launch_kwargs(jit_fn: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments JITFunction.run hands its binder: the caller's plus Triton's own
    (debug, instrumentation), as in Triton 3.6 and 3.9."""
    knobs = triton_parts()["knobs"]
    out = dict(kwargs)
    out["debug"] = out.get("debug", jit_fn.debug) or knobs.runtime.debug
    for name in ("instrumentation_mode", "fpsan_homomorphic_casts"):
        if hasattr(knobs.compilation, name):
            out[name] = getattr(knobs.compilation, name)
    return out


def specialize(jit_fn: Any, backend: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """Triton's own argument binding for `backend`: (bound_args, options, signature, constexprs, attrs).

    Mirrors `JITFunction.run` up to the compile call; raises what Triton raises for bad arguments."""
    binders = jit_fn.__dict__.setdefault("_kernelcraft_binders", {})
    key = (type(backend).__name__, repr(backend.target))
    binder = binders.get(key)
    if binder is None:
        binder = triton_parts()["create_function_from_signature"](jit_fn.signature, jit_fn.params, backend)
        binders[key] = binder
    kw = launch_kwargs(jit_fn, kwargs)
    bound_args, specialization, options = binder(*args, **kw)
    options, signature, constexprs, attrs = jit_fn._pack_args(
        backend, kw, bound_args, specialization, options
    )
    return bound_args, options, signature, constexprs, attrs


_probe: list[Any] = []


def probe_backend() -> Any:
    """An NVIDIA (sm_90) backend object, used only to type arguments; needs no GPU."""
    if not _probe:
        t = triton_parts()
        _probe.append(t["make_backend"](t["GPUTarget"]("cuda", 90, 32)))
    return _probe[0]


def _plain(value: Any) -> int | float | bool | str | None:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    inner = getattr(value, "value", None)  # tl.constexpr
    if inner is not None and inner is not value:
        return _plain(inner)
    name = getattr(value, "__name__", None) or getattr(getattr(value, "fn", None), "__name__", None)
    return str(name) if name else str(value)


def _grid(grid: Any, bound_args: dict[str, Any]) -> list[int]:
    if callable(grid):
        grid = grid(bound_args)
    if isinstance(grid, int):
        grid = (grid,)
    dims = [int(g) for g in grid]
    if not 1 <= len(dims) <= 3:
        raise ValueError(f"a Triton grid has 1 to 3 dimensions, got {grid!r}")
    return dims + [1] * (3 - len(dims))


def make_record(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any], grid: Any) -> LaunchRecord:
    """Type one launch of `fn` (a JITFunction or InterpretedFunction) without running it."""
    t = triton_parts()
    interpreted = isinstance(fn, t["InterpretedFunction"])
    jit_fn = jit_function_for(fn)
    bound_args, _options, signature, constexprs, _attrs = specialize(jit_fn, probe_backend(), args, kwargs)
    names = list(signature)
    launch = KernelLaunch(
        name=kernel_name(jit_fn),
        signature={k: str(v) for k, v in signature.items() if v != "constexpr"},
        constexprs={
            ".".join([names[path[0]], *map(str, path[1:])]): _plain(v) for path, v in constexprs.items()
        },
        grid=_grid(grid, bound_args),
        num_warps=kwargs.get("num_warps"),
        num_stages=kwargs.get("num_stages"),
    )
    return LaunchRecord(
        launch=launch, jit_fn=jit_fn, args=tuple(args), kwargs=dict(kwargs), interpreted=interpreted
    )
