"""Intercept Triton kernel launches: see which kernels a candidate's forward launches, with what.

`intercept_launches()` hooks Triton's launch path for the duration of a `with` block and records
every launch as a `LaunchRecord`: the public `KernelLaunch` (name, argument types, constexprs,
grid, num_warps/num_stages when given), the `JITFunction` and the arguments it was called with,
so that `kernelcraft.engine.checks.aot` can compile the same specialisation for any target afterwards.

    with intercept_launches(execute=False) as rec:   # compile discovery: no kernel body runs,
        model(*inputs)                               # no GPU or driver is needed
    rec.launches                                     # -> list[KernelLaunch]

    with intercept_launches(execute=True) as rec:    # verify: kernels run as usual, counted
        out = model(*inputs)
    rec.count, in_triton_launch()

Where the hook sits. Every way of launching goes through a `run` method: `kernel[grid](...)` is
`KernelInterface.__getitem__` → `run`, and `@triton.autotune`/`@triton.heuristics` wrappers call
`self.fn.run(...)` of the function they wrap. We replace, at class level, `JITFunction.run`
(normal mode), `InterpretedFunction.run` (`TRITON_INTERPRET=1`, where `@triton.jit` returns an
`InterpretedFunction`) and `Autotuner.run`/`Heuristics.run` (to mark "inside a launch" and, when
not executing, to record every autotune config instead of benchmarking, which needs a GPU).
These method names and signatures are the same in Triton 3.6 and 3.9. Each launch is typed by
`records.make_record` (Triton's own binder); which frames count as Triton's own is `trusted.py`'s.

Records keep references to the arguments (tensors included) until the recorder is dropped.
Interception is process-wide and not re-entrant: one `intercept_launches` block at a time.
Only the evaluator's worker processes use this module.
"""

from __future__ import annotations

import math
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

from kernelcraft.engine.watch import trusted as trust
from kernelcraft.engine.watch.hooks import ForbiddenLaunch, refuse_autotune_hooks, refuse_hooks
from kernelcraft.engine.watch.records import LaunchRecord, kernel_name, make_record, triton_parts
from kernelcraft.schema.evaluation import KernelLaunch

_state = threading.local()
_lock = threading.Lock()
_active: LaunchRecorder | None = None
_originals: dict[tuple[type, str], Any] = {}

LaunchCallback = Callable[["LaunchRecord"], None]
AutotuneMode = Literal["benchmark", "first"]


@dataclass(frozen=True)
class AutotuneRan:
    """One `@triton.autotune` kernel in the interpreter: the config index that ran, and every
    config left after pruning (as `str(triton.Config)` gives them)."""

    index: int
    configs: tuple[str, ...]


@dataclass
class LaunchRecorder:
    """What `intercept_launches` yields. Read it after (or during) the `with` block."""

    execute: bool
    records: list[LaunchRecord] = field(default_factory=list)
    count: int = 0
    """Launches seen, including ones whose arguments could not be typed."""
    errors: list[str] = field(default_factory=list)
    """When executing: why some launches could not be typed (the launch itself still ran)."""
    on_launch: LaunchCallback | None = None
    autotune: AutotuneMode = "benchmark"
    refused: list[ForbiddenLaunch] = field(default_factory=list)
    """Launches refused for their hooks (kept here too: a candidate may swallow the error)."""
    tape: Any = None
    """When executing: a `replay.Tape` each launch that runs is written to, or None."""
    autotune_pick: int = 0
    """autotune="first": which pruned config runs, modulo their number (a trial's index: over the
    trials every config runs, `checks/autotune.py`)."""
    interpreted: dict[str, list[float]] = field(default_factory=dict)
    """In the interpreter (`cls_key` InterpretedFunction): per kernel, [launches, programs,
    seconds] of the launches that ran (where the interpreter's time goes)."""
    autotune_ran: dict[str, AutotuneRan] = field(default_factory=dict)
    """autotune="first": per autotuned kernel, the config that ran and all the pruned configs."""

    @property
    def launches(self) -> list[KernelLaunch]:
        return [r.launch for r in self.records]

    @property
    def kernel_names(self) -> list[str]:
        """Distinct kernel names in launch order."""
        return list(dict.fromkeys(r.launch.name for r in self.records))


def in_triton_launch() -> bool:
    """True when the PyTorch op being dispatched is Triton's own, issued during a launch.

    Call it from a dispatch mode's `__torch_dispatch__` that is called directly (its class's
    `_should_skip_dynamo` returns False, as `guard.OpRecorder`'s does): the frame above the
    handler is the code that issued the op. The verify worker's op recorder uses it to ignore what Triton itself runs
    inside a launch (the interpreter copies tensors to and from the CPU; the autotuner allocates,
    zeroes and summarises its timings). Decided by what runs, never by state a candidate can set:
    every Python frame from the one that issued the op out to one of this module's own launch
    frames must be Triton's own code, found by the identity of its code object and of its
    module's globals, as Triton's modules held them before the candidate was imported
    (`trusted.trust_triton`). Python of the candidate's that Triton calls during a launch (a Tensor
    subclass's `__torch_function__`, a method shadowed on the kernel object, a grid, a heuristic,
    a replaced entry of this module's tables) puts its own frame on that path: its ops are
    recorded like any other. A frame running this module's launch code with other globals
    (`types.FunctionType(_launch.__code__, forged)`) is not a launch."""
    if getattr(_state, "depth", 0) <= 0:
        return False
    trusted = trust.table()
    frame = sys._getframe(2)  # 0: here, 1: the dispatch mode's handler, 2: who issued the op
    while frame is not None:
        code, scope = frame.f_code, frame.f_globals
        if code in _LAUNCH_CODES:
            return scope is _OWN_GLOBALS
        if trusted.get(code) is not scope:
            return False
        frame = frame.f_back  # type: ignore[assignment]
    return False


def launch_depth() -> int:
    return getattr(_state, "depth", 0)


@contextmanager
def _inside() -> Iterator[None]:
    _state.depth = getattr(_state, "depth", 0) + 1
    try:
        yield
    finally:
        _state.depth -= 1


@contextmanager
def _outside() -> Iterator[None]:
    """Run the candidate's own Python (a grid, a heuristic, a pruning function) as outside a
    launch: the op recorder sees the PyTorch it runs."""
    depth = getattr(_state, "depth", 0)
    _state.depth = 0
    try:
        yield
    finally:
        _state.depth = depth


@contextmanager
def intercept_launches(
    *,
    execute: bool = False,
    on_launch: LaunchCallback | None = None,
    autotune: AutotuneMode = "benchmark",
    tape: Any = None,
    autotune_pick: int = 0,
) -> Iterator[LaunchRecorder]:
    """Record every Triton launch made inside the block.

    execute=False: kernel bodies never run (no GPU, driver or interpreter work); each launch
    returns None; an autotuned kernel is recorded once per (pruned) config, without benchmarking.
    A forward whose host code reads kernel results (e.g. `.item()`) sees uninitialised memory.

    execute=True: launches run as usual; each is counted and recorded; `in_triton_launch()` is
    true while one runs. `on_launch` is called with each record before the kernel runs.

    autotune (execute=True only): "benchmark" lets `@triton.autotune` time its configs as usual
    (needs a GPU); "first" runs one config left after pruning, without timing: the one at
    `autotune_pick` modulo their number (the first by default). Use it in the CPU interpreter,
    where an autotuner with several configs otherwise fails ("0 active drivers"); the trials pick
    a different config each, so every config is checked (`checks/autotune.py`).
    """
    global _active
    t = triton_parts()
    trust.trust_triton()  # (before the run methods are replaced by ours)
    with _lock:
        if _active is not None:
            raise RuntimeError("intercept_launches is already active in this process; it is not re-entrant")
        recorder = LaunchRecorder(
            execute=execute, on_launch=on_launch, autotune=autotune, tape=tape, autotune_pick=autotune_pick
        )
        _active = recorder
        _patch(t)
    try:
        yield recorder
    finally:
        with _lock:
            _unpatch()
            _active = None


# --------------------------------------------------------------------------------------------
# Patching


def _patch(t: dict[str, Any]) -> None:
    targets = [
        (t["JITFunction"], "run", _jit_run),
        (t["InterpretedFunction"], "run", _interp_run),
        (t["Autotuner"], "run", _autotuner_run),
        (t["Heuristics"], "run", _heuristics_run),
    ]
    for cls, name, replacement in targets:
        _originals[(cls, name)] = cls.__dict__[name]
        setattr(cls, name, replacement)


def _unpatch() -> None:
    for (cls, name), original in _originals.items():
        setattr(cls, name, original)
    _originals.clear()


def _original(cls_key: str, name: str = "run") -> Any:
    return _originals[(triton_parts()[cls_key], name)]


def _jit_run(self: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
    return _launch(self, "JITFunction", args, kwargs, grid, warmup)


def _interp_run(self: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
    return _launch(self, "InterpretedFunction", args, kwargs, grid, warmup)


def _launch(
    fn: Any, cls_key: str, args: tuple[Any, ...], kwargs: dict[str, Any], grid: Any, warmup: bool
) -> Any:
    recorder = _active
    original = _original(cls_key)
    if recorder is None:  # a thread still running after the block ended
        return original(fn, *args, grid=grid, warmup=warmup, **kwargs)
    if warmup:  # kernel.warmup(...) compiles without launching: not a launch
        if not recorder.execute:
            return None
        return original(fn, *args, grid=grid, warmup=warmup, **kwargs)
    recorder.count += 1
    # Numbers traced from host reads (`replay/traced.py`) reach Triton, and the tape, plain:
    # Triton's specialisation computes with them, which is none of forward's arithmetic.
    args, kwargs = _plain(args), _plain(kwargs)
    _refuse(recorder, refuse_hooks, fn)
    if cls_key == "InterpretedFunction":
        _refuse(recorder, _refuse_exact_dots, fn)
    tune = getattr(_state, "autotune", None)
    if recorder.execute:
        # Typing a launch must never change what the candidate's launch does: a launch that
        # cannot be typed still runs, and Triton raises its own error if the arguments are bad.
        # The grid is evaluated here, once and outside the launch (its PyTorch ops are
        # recorded), and Triton gets the numbers: a grid callable that works on a later call
        # has none.
        with _outside():
            try:
                record = make_record(fn, args, kwargs, grid)
            except Exception as e:  # noqa: BLE001 - arbitrary candidate arguments; reported, not raised
                if callable(grid):
                    raise ForbiddenLaunch(
                        f"the grid of {kernel_name(fn)} could not be evaluated apart from the launch "
                        f"({type(e).__name__}: {e}); pass a tuple or a callable of the launch's arguments",
                        op="grid",
                    ) from e
                recorder.errors.append(f"{kernel_name(fn)}: {type(e).__name__}: {e}")
                record = None
        if record is not None:
            _annotate(record, tune)
            recorder.records.append(record)
            grid = tuple(record.launch.grid)
            if recorder.on_launch is not None:
                recorder.on_launch(record)
        if recorder.tape is not None:
            if callable(grid):
                raise ForbiddenLaunch(
                    f"the grid of {kernel_name(fn)} could not be evaluated apart from the launch; "
                    "pass a tuple or a callable of the launch's arguments",
                    op="grid",
                )
            grid = _plain(grid)
            recorder.tape.launch(original, fn, args, kwargs, tuple(grid))
        if cls_key != "InterpretedFunction":
            with _inside():
                return original(fn, *args, grid=grid, warmup=warmup, **kwargs)
        start = time.perf_counter()
        try:
            with _inside():
                return original(fn, *args, grid=grid, warmup=warmup, **kwargs)
        finally:
            _count(recorder, kernel_name(fn), grid, time.perf_counter() - start)
    with _outside():  # what the real run evaluates outside the launch, the knockout does too
        record = make_record(fn, args, kwargs, grid)
    _annotate(record, tune)
    recorder.records.append(record)
    if recorder.on_launch is not None:
        recorder.on_launch(record)
    return None


def _plain(obj: Any) -> Any:
    """`obj` with every number of a subclass of int or float (a traced read, `replay/traced.py`)
    made a plain one, by the base type's own conversion (no method of the subclass runs)."""
    kind = type(obj)
    if kind is int or kind is float or kind is bool:
        return obj
    if isinstance(obj, int) and not isinstance(obj, bool):
        return int.__int__(obj)
    if isinstance(obj, float):
        return float.__float__(obj)
    if kind is tuple:
        return tuple(_plain(x) for x in obj)
    if kind is list:
        return [_plain(x) for x in obj]
    if kind is dict:
        return {k: _plain(v) for k, v in obj.items()}
    return obj


def _count(recorder: LaunchRecorder, name: str, grid: Any, seconds: float) -> None:
    """One interpreted launch's programs and time, added to its kernel's (`interpreted`)."""
    try:
        programs = math.prod(int(g) for g in grid) if isinstance(grid, (tuple, list)) else 0
    except (TypeError, ValueError):
        programs = 0
    entry = recorder.interpreted.setdefault(name, [0, 0, 0.0])
    entry[0] += 1
    entry[1] += programs
    entry[2] += seconds


def _annotate(record: LaunchRecord, tune: tuple[int, int] | None) -> None:
    if tune is not None:
        record.inside_autotune = True
        record.autotune_config, record.autotune_configs = tune if tune[0] >= 0 else (None, tune[1])


@contextmanager
def _autotune_mark(index: int, total: int) -> Iterator[None]:
    previous = getattr(_state, "autotune", None)
    _state.autotune = (index, total)
    try:
        yield
    finally:
        _state.autotune = previous


def _autotuner_run(self: Any, *args: Any, **kwargs: Any) -> Any:
    recorder = _active
    original = _original("Autotuner")
    if recorder is not None:
        _refuse(recorder, refuse_autotune_hooks, self)
        _prune_outside(self)
    if recorder is None or (recorder.execute and recorder.autotune == "benchmark"):
        since = recorder.tape.mark() if recorder is not None and recorder.tape is not None else None
        with _inside(), _autotune_mark(-1, len(self.configs)):
            out = original(self, *args, **kwargs)
        if since is not None and recorder is not None:
            recorder.tape.keep_last_launch(since)  # the benchmarking runs are not forward's
        return out
    if recorder.execute:  # autotune="first": run the first pruned config, no benchmarking
        self.nargs = dict(zip(self.arg_names, args, strict=False))
        try:
            with _inside():
                configs = list(self.prune_configs(kwargs)) if len(self.configs) > 1 else list(self.configs)
            index = recorder.autotune_pick % len(configs)
            config = configs[index]
            recorder.autotune_ran[kernel_name(self.fn)] = AutotuneRan(index, tuple(str(c) for c in configs))
            self.best_config = config
            with _autotune_mark(index, len(configs)):
                with _inside():
                    if config.pre_hook is not None:
                        config.pre_hook({**self.nargs, **kwargs, **config.all_kwargs()})
                return self.fn.run(*args, **kwargs, **config.all_kwargs())
        finally:
            self.nargs = None
    # Not executing: benchmarking needs a GPU, so record every config the autotuner would try.
    self.nargs = dict(zip(self.arg_names, args, strict=False))
    try:
        configs = list(self.configs)
        if len(configs) > 1:
            configs = list(self.prune_configs(kwargs))
        for i, config in enumerate(configs):
            with _autotune_mark(i, len(configs)):
                self.fn.run(*args, **kwargs, **config.all_kwargs())
    finally:
        self.nargs = None
    return None


def _heuristics_run(self: Any, *args: Any, **kwargs: Any) -> Any:
    # The heuristics are the candidate's Python: they run as outside a launch (their PyTorch ops
    # are recorded); the launch they lead to marks itself.
    with _outside():
        return _original("Heuristics")(self, *args, **kwargs)


# --------------------------------------------------------------------------------------------
# Hooks: Python of the candidate's that Triton would run around a kernel


def _refuse(recorder: LaunchRecorder, check: Callable[[Any], None], obj: Any) -> None:
    try:
        check(obj)
    except ForbiddenLaunch as e:
        recorder.refused.append(e)
        raise


def _refuse_exact_dots(fn: Any) -> None:
    """In the interpreter: the TF32 emulation (tf32.py) must be what this launch's dots call."""
    tf32 = sys.modules.get("kernelcraft.engine.watch.tf32")
    why = tf32.undone() if tf32 is not None else None
    if why is not None:
        raise ForbiddenLaunch(
            f"{kernel_name(fn)} launched with the interpreter's TF32 emulation undone ({why}); "
            "leave Triton's interpreter alone",
            op="tf32 emulation",
        )


def _prune_outside(tuner: Any) -> None:
    """Run the candidate's pruning functions (`prune_configs_by`) as outside a launch: their
    PyTorch ops are recorded. Wrapped once per autotuner."""
    for attr in ("early_config_prune", "perf_model"):
        fn = getattr(tuner, attr, None)
        if fn is None or getattr(fn, "_kernelcraft_outside", False):
            continue

        def outside(*a: Any, _fn: Any = fn, **k: Any) -> Any:
            with _outside():
                return _fn(*a, **k)

        outside._kernelcraft_outside = True  # type: ignore[attr-defined]
        setattr(tuner, attr, outside)


# --------------------------------------------------------------------------------------------
# The frames that make a PyTorch op Triton's own (in_triton_launch): the launch wrappers above,
# by the identity of their code.
_LAUNCH_CODES = frozenset(f.__code__ for f in (_launch, _autotuner_run))
_OWN_GLOBALS = globals()
