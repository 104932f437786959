"""Python of the candidate's that Triton would run around a kernel launch: refused.

Triton calls Python around a launch: JIT pre-run hooks, the process-wide launch, load and compile
hooks of `triton.knobs.runtime`, `@triton.autotune` pre/post hooks and `Config.pre_hook`. Work
done there is not a kernel's, and neither the op recorder (inside a launch) nor the knockout (which
skips launches) would see it: a kernel that stores nothing plus a hook computing the answer with
PyTorch passed before these checks (issue 25). `launches.py` calls them at every intercepted
launch and autotuner run; they raise `ForbiddenLaunch`, a `forbidden_construct` verdict. Triton's
own hooks (reset_to_zero, restore_value, the no-op defaults) pass, told apart by the identity of
their code and of the autotuner they close over, never by a name. Grid callables, heuristics and
pruning functions are not refused: `launches.py` runs them outside the launch, where their PyTorch
is recorded. Runs in the candidate's worker only; guard.py watches this module's functions.
"""

from __future__ import annotations

import sys
import types
from typing import Any


class ForbiddenLaunch(RuntimeError):
    """A launch that runs Python of the candidate's around the kernel (a hook): refused, since
    work done there is not a kernel's and a knockout could not tell it apart."""

    def __init__(self, message: str, op: str) -> None:
        super().__init__(message)
        self.op = op


def refuse_hooks(fn: Any) -> None:
    """Raise `ForbiddenLaunch` when a launch of `fn` would run a hook: a JIT pre-run hook, or one
    of Triton's process-wide launch, load or compile hooks."""
    inner = getattr(fn, "fn", None)
    name = str(getattr(inner, "__name__", None) or getattr(fn, "__name__", None) or repr(fn))
    for obj in (fn, getattr(fn, "fn", None)):
        hooks = getattr(obj, "pre_run_hooks", None)
        if hooks:
            raise ForbiddenLaunch(
                f"{name} has a pre-run hook (add_pre_run_hook): Python run before the kernel is not "
                "the kernel's work; do that work in a Triton kernel",
                op="add_pre_run_hook",
            )
    from triton import knobs

    runtime = getattr(knobs, "runtime", None)
    for attr in (
        "launch_enter_hook",
        "launch_exit_hook",
        "kernel_load_start_hook",
        "kernel_load_end_hook",
        "jit_cache_hook",
        "jit_post_compile_hook",
        "add_stages_inspection_hook",
    ):
        hook = getattr(runtime, attr, None)
        if hook is None or _empty_chain(hook):
            continue
        raise ForbiddenLaunch(
            f"triton.knobs.runtime.{attr} is set: Python run around a launch is not the kernel's work; "
            "remove the hook",
            op=f"knobs.runtime.{attr}",
        )


def _empty_chain(hook: Any) -> bool:
    """Triton's own empty HookChain (newer Triton holds chains, not None), by type, not by name."""
    chain = getattr(sys.modules.get("triton.knobs"), "HookChain", None)
    return chain is not None and type(hook) is chain and type(hook.calls) is list and not hook.calls


def _triton_own_hook_codes() -> frozenset[Any]:
    """The code objects of the hooks `Autotuner.__init__` installs itself (a no-op, or the
    reset_to_zero / restore_value hooks), found among its constants."""
    from triton.runtime.autotuner import Autotuner

    init = Autotuner.__init__
    return frozenset(c for c in init.__code__.co_consts if isinstance(c, types.CodeType))


def refuse_autotune_hooks(tuner: Any) -> None:
    """Raise `ForbiddenLaunch` for an autotuner hook the candidate wrote: `pre_hook`/`post_hook`
    of `@triton.autotune` or of a `Config`. Triton's own (reset_to_zero, restore_value) pass,
    told apart by the identity of their code and of the autotuner they close over."""
    own = _triton_own_hook_codes()
    for attr in ("pre_hook", "post_hook"):
        hook = getattr(tuner, attr, None)
        if hook is None:
            continue
        code = getattr(hook, "__code__", None)
        cells = getattr(hook, "__closure__", None) or ()
        ours = (
            type(hook) is types.FunctionType
            and code in own
            and all(c.cell_contents is tuner for c in cells)
            and all(
                type(getattr(tuner, n, [])) in (list, tuple)
                and all(type(x) is str for x in getattr(tuner, n, []))
                for n in ("reset_to_zero", "restore_value")
            )
        )
        if not ours:
            raise ForbiddenLaunch(
                f"@triton.autotune {attr}: Python run around the kernel is not the kernel's work; "
                "use reset_to_zero/restore_value, or do the work in a Triton kernel",
                op=f"autotune.{attr}",
            )
    for config in getattr(tuner, "configs", None) or ():
        if getattr(config, "pre_hook", None) is not None:
            raise ForbiddenLaunch(
                "a triton.Config has a pre_hook: Python run before the kernel is not the kernel's work",
                op="Config.pre_hook",
            )
