"""libdevice in Triton's CPU interpreter: `libdevice.tanh(x)` computes there as on the GPU.

GPU kernels call CUDA's libdevice for what `triton.language` lacks (`tanh`, `erf`, `pow`, `rint`,
...): `from triton.language.extra import libdevice` (the generic module, whose functions are stubs
the compiler swaps for the backend's) or `triton.language.extra.cuda.libdevice` (calls of
`extern_elementwise` naming `__nv_tanhf`). Triton's interpreter (3.6 to 3.9) runs neither: the
stubs return None ("cannot convert None to tensor") and its `create_extern_elementwise` raises
`NotImplementedError`, so an honest kernel that uses them could not be verified on the CPU.

`serve_libdevice()` fills the generic module's stubs with the CUDA module's functions, as the
compiler does for an NVIDIA target, and computes `InterpreterBuilder.create_extern_elementwise`
from the symbol's name with numpy in float64 (`_FUNCTIONS`); a symbol it does not know still raises
the interpreter's error, naming it. Installed with the TF32 emulation (`tf32.emulate_tf32`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

_installed: dict[str, Any] = {}


def _round_half_away(x: np.ndarray) -> np.ndarray:
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def _cbrt(x: np.ndarray) -> np.ndarray:
    return np.cbrt(x)


def _each(fn: Callable[[float], float]) -> Callable[[np.ndarray], np.ndarray]:
    """A `math` function over an array (numpy has no erf), in float64."""
    return lambda x: np.vectorize(fn, otypes=[np.float64])(x)


def _erfinv(y: float) -> float:
    if not -1.0 < y < 1.0:
        return math.copysign(math.inf, y) if abs(y) == 1.0 else math.nan
    x = math.copysign(math.sqrt(-math.log((1.0 - abs(y)) / 2.0)), y) * 0.8  # a start; Newton's steps
    for _ in range(60):
        step = (math.erf(x) - y) / (2.0 / math.sqrt(math.pi) * math.exp(-x * x))
        x -= step
        if abs(step) <= 1e-16 * max(1.0, abs(x)):
            break
    return x


# numpy, never torch: a torch op here would be seen as forward's own PyTorch compute.
_FUNCTIONS: dict[str, Callable[..., np.ndarray]] = {
    **{
        name: getattr(np, name)
        for name in (
            "tanh",
            "exp",
            "exp2",
            "expm1",
            "log",
            "log2",
            "log10",
            "log1p",
            "sqrt",
            "sin",
            "cos",
            "tan",
            "sinh",
            "cosh",
            "floor",
            "ceil",
            "trunc",
            "isnan",
            "isinf",
            "isfinite",
            "signbit",
            "hypot",
            "fmod",
            "fmin",
            "fmax",
            "copysign",
            "cbrt",
        )
    },
    "asin": np.arcsin,
    "acos": np.arccos,
    "atan": np.arctan,
    "asinh": np.arcsinh,
    "acosh": np.arccosh,
    "atanh": np.arctanh,
    "atan2": np.arctan2,
    "pow": np.power,
    "powi": np.power,
    "remainder": np.remainder,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "erf": _each(math.erf),
    "erfc": _each(math.erfc),
    "erfinv": _each(_erfinv),
    "lgamma": _each(math.lgamma),
    "tgamma": _each(math.gamma),
    "fabs": np.abs,
    "abs": np.abs,
    "rint": np.rint,  # ties to even, as CUDA's rint
    "nearbyint": np.rint,
    "round": _round_half_away,  # CUDA's round: ties away from zero
    "rcbrt": lambda x: 1.0 / np.cbrt(x),
    "exp10": lambda x: np.power(10.0, x),
    "rcp": lambda x: 1.0 / x,
    "saturate": lambda x: np.clip(x, 0.0, 1.0),
    "fdim": lambda a, b: np.maximum(a - b, 0.0),
    "div_rn": np.divide,
    "fdiv_rn": np.divide,
    "fma": lambda a, b, c: a * b + c,
    "fma_rn": lambda a, b, c: a * b + c,
    "isinfd": np.isinf,
    "isnand": np.isnan,
    "isfinited": np.isfinite,
    "signbitd": np.signbit,
}


def function_for(symbol: str) -> Callable[..., np.ndarray] | None:
    """The numpy function computing libdevice's `symbol` (`__nv_tanhf`, `__nv_fast_expf`,
    `__nv_powf`), or None where this module does not know it."""
    name = symbol.removeprefix("__nv_").removeprefix("fast_")
    for candidate in (name, name.removesuffix("f"), name.removesuffix("f").removesuffix("_rn")):
        fn = _FUNCTIONS.get(candidate)
        if fn is not None:
            return fn
    return None


def serve_libdevice() -> None:
    """Make every later interpreted libdevice call compute. Idempotent."""
    if _installed:
        return
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    _installed["create_extern_elementwise"] = builder.create_extern_elementwise
    _installed["TensorHandle"] = interpreter.TensorHandle
    _installed["np_dtype"] = interpreter._get_np_dtype
    _installed["patch_lang"] = interpreter._patch_lang
    _installed["interpreter"] = interpreter
    builder.create_extern_elementwise = _create_extern_elementwise
    interpreter._patch_lang = _patch_lang


def _patch_lang(fn: Any) -> Any:
    """The interpreter's own patching for one launch, and, in the same scope (undone after the
    launch, so a compile in this process still sees the stubs), each libdevice function as the
    CUDA module's, called with the interpreter's semantic as `triton.language`'s builtins are."""
    import triton.language.extra.cuda.libdevice as cuda
    import triton.language.extra.libdevice as generic

    interpreter = _installed["interpreter"]
    scope = _installed["patch_lang"](fn)
    for module in (generic, cuda):
        for name, member in list(vars(module).items()):
            real = getattr(cuda, name, None)
            if name.startswith("_") or not callable(member) or not callable(real):
                continue
            if getattr(real, "__module__", None) != cuda.__name__:
                continue
            scope.set_attr(module, name, _bound(real, interpreter))
    return scope


def _bound(real: Callable[..., Any], interpreter: Any) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        kwargs.pop("_semantic", None)
        return real(*args, **kwargs, _semantic=interpreter.interpreter_semantic)

    return call


def _create_extern_elementwise(
    self: Any, lib_name: str, lib_path: str, symbol: str, args: list[Any], ret_type: Any, is_pure: bool
) -> Any:
    fn = function_for(symbol)
    if fn is None:
        raise NotImplementedError(f"libdevice's {symbol} is not supported in Triton's CPU interpreter")
    scalar = getattr(ret_type, "scalar", ret_type)
    values = [np.asarray(a.data) if hasattr(a, "data") else a for a in args]
    wide = [v.astype(np.float64) if isinstance(v, np.ndarray) and v.dtype.kind == "f" else v for v in values]
    with np.errstate(all="ignore"):  # NaN and inf come out as the GPU gives them, unwarned
        out = fn(*wide)
    data = np.asarray(out).astype(_installed["np_dtype"](scalar))
    return _installed["TensorHandle"](data, scalar)
