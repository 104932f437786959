"""The reference's torch.compile with a gate before its GPU work (the reference worker's gated
`warmup_reference`, for a baseline job: `job.timing.JobTiming.baseline`).

Most of torch.compile's first call is the CPU's: dynamo traces forward, inductor lowers it and
Triton compiles its kernels (seconds a task). Gated, that work runs while the job holds no GPU
lock, so other jobs' timings go on meanwhile. The gate opens, once, at the first of:

- dynamo's end of compiling a frame (its compile-end callback, which runs before the compiled
  code does);
- inductor asking its benchmarker to time something on the GPU during the compile (shape
  padding's matmul benchmarks).

Opening it calls `ask` (the worker says `gpu_wanted` and waits for the job's `run_compiled`, sent
once the job holds the GPU), and the compile goes on from there under the job's lock: the first
run with inductor's autotuning, and any frame compiled after a graph break. A model of which
dynamo compiles no frame runs its first call before the gate would open; `Gated.opened` says
whether it did (the job is told, `Warm.ungated`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

from kernelcraft.engine.wire.protocol import GpuWanted, RunCompiled, Warm, parse_request
from kernelcraft.engine.worker.common import error_line


class Gated:
    """One gated compile: `open()` calls `ask(seconds since the compile started)` the first
    time, never again."""

    def __init__(self, ask: Callable[[float], None]) -> None:
        self.ask = ask
        self.opened = False
        self.started = time.perf_counter()

    def open(self, *_args: Any) -> None:
        if not self.opened:
            self.opened = True
            self.ask(time.perf_counter() - self.started)


@contextlib.contextmanager
def gpu_gate(ask: Callable[[float], None]) -> Iterator[Gated]:
    """While inside: the first torch.compile of this thread opens the gate before its GPU work."""
    from torch._dynamo.callback import callback_handler

    gate = Gated(ask)
    callback_handler.register_end_callback(gate.open)
    restore = _gate_benchmarks(gate)
    try:
        yield gate
    finally:
        restore()
        with contextlib.suppress(ValueError):
            callback_handler.end_callbacks.remove(gate.open)


def _gate_benchmarks(gate: Gated) -> Callable[[], None]:
    """Open `gate` before inductor's benchmarker times anything on the GPU; the undo. (Inductor
    looks its benchmarker up as a module attribute and calls its bound method: an attribute of
    the instance shadows it.) Where this torch has no such benchmarker, nothing is gated here."""
    try:
        from torch._inductor.runtime import benchmarking

        bench = benchmarking.benchmarker
        original = bench.benchmark_gpu
    except (ImportError, AttributeError):
        return lambda: None

    def benchmark_gpu(*args: Any, **kwargs: Any) -> Any:
        gate.open()
        return original(*args, **kwargs)

    setattr(bench, "benchmark_gpu", benchmark_gpu)  # noqa: B010 - on the instance, not the class

    def restore() -> None:
        with contextlib.suppress(AttributeError):
            del bench.benchmark_gpu

    return restore


def compile_reference(worker: Any, *, gated: bool) -> Warm:
    """The reference worker's `warmup_reference`: `worker.compiled` is torch.compile of its
    Model, run once on its inputs; `Warm(error=...)` when that failed (`worker.compiled` None).
    A process that compiled its Model before (a kept reference, its Model rebuilt) may find the
    code in dynamo's cache and compile nothing: gated, it asks for the GPU before the call."""
    gate: contextlib.AbstractContextManager[Gated | None] = (
        gpu_gate(lambda s: want_gpu(worker, s)) if gated else contextlib.nullcontext(None)
    )
    try:
        with worker.torch.no_grad(), gate as g:
            if g is not None and worker.compiles:
                g.open()
            worker.compiles += 1
            worker.compiled = worker.torch.compile(worker.model)
            worker.compiled(*worker.private_inputs)
        worker.sync()
    except Exception as e:
        worker.compiled = None
        return Warm(error=error_line(e))
    return Warm(ungated=True) if g is not None and not g.opened else Warm()


def want_gpu(worker: Any, compile_s: float) -> None:
    """The gate: say `gpu_wanted`, wait for the job's `run_compiled` (it then holds the GPU).
    Any other answer breaks the protocol: the worker exits (as it does on a request it does not
    know), nothing having run on the GPU. It does not raise an exception: dynamo calls the gate
    from its compile-end callback, and an exception there leaves dynamo's callbacks disabled."""
    worker.send(GpuWanted(compile_s=round(compile_s, 3)))
    req = parse_request(worker.recv().header)
    if not isinstance(req, RunCompiled):
        raise SystemExit(f"the job answered gpu_wanted with {type(req).__name__}, not run_compiled")
