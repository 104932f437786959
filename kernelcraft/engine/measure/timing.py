"""GPU timing primitives, run inside an evaluator worker (CUDA only).

Import this module BEFORE importing any candidate: it captures `torch.cuda.Event` (and its
`record`/`elapsed_time`), `torch.cuda.synchronize`, `torch.cuda.CUDAGraph`, the current-stream
functions and `time.perf_counter` at import and uses only those captured references, so a candidate
that monkey-patches them cannot change a measurement; `timing_functions_intact()` names any that
were patched afterwards.

**Streams.** The harness takes its own stream (the current one) before calling the candidate and
records every start/end event explicitly on it (`event.record(harness_stream)`), never on "whatever
is current". Every call of the candidate is wrapped (`_guarded`): if the current stream differs
after the call, it is set back to the harness stream and `StreamChanged` is raised — the evaluator
turns that into a `forbidden_construct` verdict ("forward changed the current CUDA stream").

Protocol of one repetition (method "cuda_events"), after warm-up:

    flush L2 (a 256 MB buffer `.zero_()`, on the harness stream before the start event: not timed)
    GPU spin of ~100 µs (`torch.cuda._sleep`): the host enqueues fn before the GPU reaches start
    start.record(harness); fn(); mid.record(harness); torch.cuda.synchronize(); end.record(harness)

The sample is start → mid, as `triton.testing.do_bench` times: fn's kernels are already queued
when the start event runs, so the host's launch overhead (tens of µs for a Triton launch from
Python) is not in the sample — do_bench gets the same by queueing all repetitions at once. The end
event, recorded after a device-wide synchronise, guards it: mid → end is the host round-trip
(synchronise returns, the end event is enqueued and runs; measured once per process with an empty
body, `sync_overhead_us`) plus any work still running on another stream. When its least value over
the repetitions exceeds that round-trip by more than `ESCAPE_SLACK_US` or `ESCAPE_FRACTION` of the
sample in each of `ESCAPE_ATTEMPTS` measurements, fn hid work outside the timed stream and
`WorkEscaped` is raised (a `forbidden_construct` verdict). One measurement is not enough: on the
H200 machine the eager reference once showed a 289 µs median tail while other processes were
starting on the GPU. A
sample is never reported as ≤ 0: it is clipped at `MIN_SAMPLE_US`, and `Timing.clipped` counts
the clipped samples (a kernel that fast is a measurement artefact or a cheat; the evaluator
rejects timings below the physical floor). Repetitions continue until the spread (IQR / median)
is within `target_spread` for kernels over 50 µs, or a time cap is reached.

For kernels under ~20 µs launch overhead dominates, so method "cuda_graph" captures many calls of
`fn` in one CUDA graph and divides a replay's time by the number of calls. **L2 policy:** in
"cuda_events" mode the L2 is flushed before every repetition. A graph cannot flush between its
calls, so it rotates instead: when `input_sets` is a builder, `rotation_sets()` decides how many
distinct input sets to build so that inputs plus outputs of all sets together exceed
`ROTATE_TOTAL_BYTES` (256 MB, over 4x an H200's 60 MB L2), at most `MAX_ROTATE_SETS` sets and
`ROTATE_MEMORY_BYTES` of memory; the calls in the graph cycle through the sets, and the outputs of
the last `len(sets)` calls are kept alive during capture so that output buffers rotate too. By the
time a set is used again, the L2 has seen more than 2x its size of other data: the numbers reflect
HBM, not L2 (sets under 4 MB stay partly L2-resident; launch latency dominates them anyway).
Caveat: work a candidate launches eagerly on a non-capturing stream during capture is not replayed;
the stream guard, the verifier's checks and the evaluator's physical-floor check catch that.

**Audit** (`audit.py`): given a `TimedAudit`, every timed call runs on a fresh draw of the
inputs (events) or over sets refreshed before every replay (graph), and outputs of calls chosen
after they ran are kept for the reference to check.

`sample_round` + `summarize` serve the interleaved protocol: the evaluator alternates rounds of the
candidate (one process) and the reference (another) and merges the samples with `summarize`,
which is pure Python.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch

from kernelcraft.engine.measure.audit import TimedAudit
from kernelcraft.engine.measure.rotation import (
    add_rotation,
    first_sets,
    nbytes,
)
from kernelcraft.engine.measure.samples import MIN_SAMPLE_US, spread_within, summarize
from kernelcraft.schema.evaluation import Timing

# Captured before any candidate can be imported into this process.
_perf_counter = time.perf_counter
_Event = torch.cuda.Event
_event_record = torch.cuda.Event.record
_event_elapsed = torch.cuda.Event.elapsed_time
_synchronize = torch.cuda.synchronize
_CUDAGraph = torch.cuda.CUDAGraph
_graph_replay = torch.cuda.CUDAGraph.replay
_zero_ = torch.Tensor.zero_
_current_stream = torch.cuda.current_stream
_set_stream = torch.cuda.set_stream
_gpu_sleep = torch.cuda._sleep

_CAPTURED: dict[str, tuple[Callable[[], Any], Any]] = {
    "time.perf_counter": (lambda: time.perf_counter, _perf_counter),
    "torch.cuda.Event": (lambda: torch.cuda.Event, _Event),
    "torch.cuda.Event.record": (lambda: torch.cuda.Event.record, _event_record),
    "torch.cuda.Event.elapsed_time": (lambda: torch.cuda.Event.elapsed_time, _event_elapsed),
    "torch.cuda.synchronize": (lambda: torch.cuda.synchronize, _synchronize),
    "torch.cuda.CUDAGraph": (lambda: torch.cuda.CUDAGraph, _CUDAGraph),
    "torch.cuda.CUDAGraph.replay": (lambda: torch.cuda.CUDAGraph.replay, _graph_replay),
    "torch.Tensor.zero_": (lambda: torch.Tensor.zero_, _zero_),
    "torch.cuda.current_stream": (lambda: torch.cuda.current_stream, _current_stream),
    "torch.cuda.set_stream": (lambda: torch.cuda.set_stream, _set_stream),
    "torch.cuda._sleep": (lambda: torch.cuda._sleep, _gpu_sleep),
}

Method = Literal["cuda_events", "cuda_graph"]
L2_FLUSH_BYTES = 256 * 1024 * 1024  # as triton.testing.do_bench: larger than any current L2 (H200: 60 MB)
HEAD_START_CYCLES = 200_000  # GPU spin before each start event: ~100 µs at an H200's ~2 GHz
ESCAPE_SLACK_US = 25.0  # mid -> end may exceed the host round-trip by this much ...
ESCAPE_FRACTION = 0.2  # ... or by this fraction of the sample, before fn counts as hiding work
ESCAPE_ATTEMPTS = 3  # ... in each of this many measurements
ESCAPE_RETRY_PAUSE_S = 0.05
GRAPH_BELOW_US = 20.0  # use CUDA graphs below this estimated time per call


def timing_functions_intact() -> str | None:
    """None when every timing function is still the one captured at import, else the first
    patched one's name (a candidate tampered with the timers)."""
    for name, (current, original) in _CAPTURED.items():
        if current() is not original:
            return name
    return None


class StreamChanged(RuntimeError):
    """fn left the current CUDA stream changed (work moved off the harness's stream)."""


class WorkEscaped(StreamChanged):
    """fn's work went on running on another CUDA stream after its work on the harness stream had
    finished (it was hidden from the timed interval)."""


STREAM_CHANGED_MESSAGE = (
    "forward changed the current CUDA stream (torch.cuda.set_stream or equivalent) and did not "
    "restore it; launch on the current stream"
)


def stream_changed(before: Any) -> bool:
    """True (and the current stream set back to `before`) when fn left another stream current."""
    if _current_stream() == before:
        return False
    _set_stream(before)
    return True


def _guarded(fn: Callable[..., Any]) -> Callable[..., Any]:
    """fn, restoring the current stream after every call and raising `StreamChanged` if fn
    changed it."""

    def call(*args: Any) -> Any:
        before = _current_stream()
        changed = False
        try:
            return fn(*args)
        finally:
            changed = stream_changed(before)
            if changed:
                raise StreamChanged(STREAM_CHANGED_MESSAGE)

    return call


def _require_cuda() -> None:
    if not torch.cuda.is_available():
        raise RuntimeError("GPU timing needs a CUDA device; none is available in this process")


_l2_buffer: list[torch.Tensor] = []


def _flush_l2() -> None:
    if not _l2_buffer:
        _l2_buffer.append(torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device="cuda"))
    _zero_(_l2_buffer[0])


_overhead: list[float] = []


def sync_overhead_us() -> float:
    """Median time between start and end events around an empty body with a device-wide
    synchronise before the end event (the host round-trip the protocol adds). Measured once."""
    if not _overhead:
        _require_cuda()
        samples = []
        stream = _current_stream()
        for _ in range(50):
            start, end = _Event(enable_timing=True), _Event(enable_timing=True)
            _synchronize()
            _event_record(start, stream)
            _synchronize()
            _event_record(end, stream)
            _synchronize()
            samples.append(_event_elapsed(start, end) * 1000.0)
        _overhead.append(statistics.median(samples[10:]))
    return _overhead[0]


def _clip(us: float) -> float:
    return max(us, MIN_SAMPLE_US)


def _event_samples(
    fn: Callable[..., Any],
    sets: list[Sequence[Any]],
    reps: int,
    flush_l2: bool,
    start_at: int,
    audit: TimedAudit | None = None,
) -> list[float]:
    """`reps` samples of fn (µs, start -> mid). Raises `WorkEscaped` when every one of
    `ESCAPE_ATTEMPTS` measurements shows work outlasting the harness stream: a stall caused by
    another process on the GPU (a worker creating its CUDA context, say) passes, hidden work does
    not."""
    hidden: list[float] = []
    for attempt in range(ESCAPE_ATTEMPTS):
        if attempt:
            time.sleep(ESCAPE_RETRY_PAUSE_S)
        samples, extra = _event_round(fn, sets, reps, flush_l2, start_at, audit)
        if extra <= max(ESCAPE_SLACK_US, ESCAPE_FRACTION * statistics.median(samples)):
            return samples
        hidden.append(extra)
    raise WorkEscaped(
        f"work went on for {min(hidden):.1f} µs after forward's work on the current CUDA stream had "
        f"finished (the least over the repetitions, in each of {len(hidden)} measurements): it ran on "
        "another stream, outside the timed interval; launch on the current stream"
    )


def _event_round(
    fn: Callable[..., Any],
    sets: list[Sequence[Any]],
    reps: int,
    flush_l2: bool,
    start_at: int,
    audit: TimedAudit | None = None,
) -> tuple[list[float], float]:
    """Samples (µs, start -> mid) and how far the least mid -> end exceeds the host round-trip."""
    overhead = sync_overhead_us()
    harness = _current_stream()
    call = _guarded(fn)
    events = [
        (_Event(enable_timing=True), _Event(enable_timing=True), _Event(enable_timing=True))
        for _ in range(reps)
    ]
    _synchronize()
    for i, (start, mid, end) in enumerate(events):
        if audit is not None and audit.spent(i):  # the task's draws are slow: a shorter round
            events = events[:i]
            break
        args = sets[(start_at + i) % len(sets)]
        if audit is not None:
            args = audit.call_args(args)  # a fresh draw, before the flush: not timed
        if flush_l2:
            _flush_l2()
        _gpu_sleep(HEAD_START_CYCLES)
        _event_record(start, harness)
        out = call(*args)
        _event_record(mid, harness)
        _synchronize()
        _event_record(end, harness)
        if audit is not None:
            audit.called(out)
        del out, args
    _synchronize()
    samples = [_clip(_event_elapsed(s, m) * 1000.0) for s, m, _ in events]
    # The least tail: hidden work lengthens every repetition's, a passing stall only some.
    tail = min(_event_elapsed(m, e) * 1000.0 for _, m, e in events)
    return samples, tail - overhead


class _Graph:
    """`calls` calls of fn (rotating through the input sets) captured in one CUDA graph. The
    outputs of the last `len(sets)` calls stay alive during capture, so output buffers rotate
    with the inputs instead of one buffer staying hot in L2."""

    def __init__(
        self, fn: Callable[..., Any], sets: list[Sequence[Any]], calls: int, audit: TimedAudit | None = None
    ) -> None:
        n = len(sets)
        self.sets, self.audit = sets, audit
        self.calls = max(calls, n)
        self.calls += (-self.calls) % n  # a whole number of rotations
        call = _guarded(fn)
        harness = _current_stream()
        stream = torch.cuda.Stream()
        stream.wait_stream(harness)
        with torch.cuda.stream(stream):
            for args in sets:  # warm on the capture stream (allocator, lazy init)
                call(*args)
        harness.wait_stream(stream)
        _synchronize()
        self.graph = _CUDAGraph()
        try:
            with torch.cuda.graph(self.graph):
                recent: list[Any] = []
                for i in range(self.calls):
                    recent.append(call(*sets[i % n]))
                    if audit is not None:
                        audit.captured(i % n, recent[-1])
                    if len(recent) >= n:
                        recent.pop(0)
                del recent
        except Exception as e:
            if isinstance(e, StreamChanged) or isinstance(e.__context__, StreamChanged):
                raise StreamChanged(STREAM_CHANGED_MESSAGE) from e
            raise
        finally:
            if _current_stream() != harness:
                _set_stream(harness)
        _synchronize()

    def samples(self, reps: int) -> list[float]:
        overhead = sync_overhead_us()
        harness = _current_stream()
        pairs = [(_Event(enable_timing=True), _Event(enable_timing=True)) for _ in range(reps)]
        _synchronize()
        for start, end in pairs:
            if self.audit is not None:
                self.audit.refresh(self.sets)  # fresh values in the graph's inputs: not timed
            _event_record(start, harness)
            _graph_replay(self.graph)
            _synchronize()
            _event_record(end, harness)
        _synchronize()
        if self.audit is not None:
            self.audit.replayed()
        return [_clip((_event_elapsed(s, e) * 1000.0 - overhead) / self.calls) for s, e in pairs]


def estimate_us(
    fn: Callable[..., Any], sets: list[Sequence[Any]], flush_l2: bool = True
) -> tuple[float, int]:
    """Warm fn up (3 calls) and estimate its time per call from 5 flushed, synchronised calls.
    Also returns the bytes of tensors one call returns (a CUDA graph keeps every call's output)."""
    _require_cuda()
    call = _guarded(fn)
    out = call(*sets[0])
    out_bytes = nbytes(_leaves(out))
    del out
    for i in range(1, 3):
        call(*sets[i % len(sets)])
    _synchronize()
    return statistics.median(_event_samples(fn, sets, 5, flush_l2, 0)), out_bytes


def _leaves(obj: Any) -> list[Any]:
    from torch.utils._pytree import tree_leaves

    return [t for t in tree_leaves(obj) if isinstance(t, torch.Tensor)]


def choose_method(estimate: float) -> Method:
    return "cuda_graph" if estimate < GRAPH_BELOW_US else "cuda_events"


GRAPH_MEMORY_BYTES = 1 << 30  # outputs all calls captured in one graph may keep alive


def _graph_calls(estimate: float, out_bytes: int) -> int:
    # ~200 µs of work per replay, at least 10 and at most 1000 calls, outputs within 1 GiB.
    calls = min(1000, max(10, 200.0 / max(estimate, 0.1)))
    if out_bytes > 0:
        calls = min(calls, max(10, GRAPH_MEMORY_BYTES // out_bytes))
    return int(calls)


@dataclass
class Round:
    """One round of samples: µs per call, the method, how many input sets the calls used, and the
    estimate of one call the round sized itself by."""

    times_us: list[float]
    method: Method
    sets: int
    estimate_us: float = 0.0


def _graph_or_none(
    fn: Callable[..., Any],
    sets: list[Sequence[Any]],
    input_sets: Sequence[Sequence[Any]] | Callable[[], Sequence[Any]] | None,
    estimate: float,
    out_bytes: int,
    strict: bool,
    audit: TimedAudit | None = None,
) -> _Graph | None:
    """A captured graph over rotating sets, or None when fn cannot be captured (host syncs,
    allocations the graph pool refuses, ...) and `strict` is false. `StreamChanged` always raises."""
    try:
        rotated = add_rotation(sets, input_sets, out_bytes)
        return _Graph(fn, rotated, _graph_calls(estimate, out_bytes), audit)
    except StreamChanged:
        raise
    except Exception:  # noqa: BLE001 - capture fails in many ways (host syncs, dynamo, allocator)
        if strict:
            raise
        _synchronize()
        if audit is not None:
            audit.restart()
        return None


def sample_round(
    fn: Callable[..., Any],
    *,
    budget_ms: float = 200.0,
    method: Method | Literal["auto"] = "auto",
    input_sets: Sequence[Sequence[Any]] | Callable[[], Sequence[Any]] | None = None,
    flush_l2: bool = True,
    estimate: float | None = None,
    audit: TimedAudit | None = None,
) -> Round:
    """One round for the interleaved protocol: about `budget_ms` of samples (µs per call, at least
    5), the method used and the number of rotating sets. Pass the returned method to later rounds
    so all rounds agree. Raises `StreamChanged` if fn leaves another CUDA stream current.
    `estimate`: µs a call, as an earlier round of the same fn in this process found it
    (`Round.estimate_us`): one warm call replaces the warm-up and the estimate (8 calls; half a
    level's baseline timing went to them on the H200). `audit`: the timed calls' fresh inputs
    and kept outputs (`audit.py`)."""
    sets = first_sets(input_sets)
    if estimate is not None and estimate > 0:
        estimate, out_bytes = estimate, _warm_once(fn, sets)
    else:
        estimate, out_bytes = estimate_us(fn, sets, flush_l2)
    chosen: Method = choose_method(estimate) if method == "auto" else method
    if chosen == "cuda_graph":
        graph = _graph_or_none(
            fn, sets, input_sets, estimate, out_bytes, strict=method == "cuda_graph", audit=audit
        )
        if graph is not None:
            reps = int(max(5, min(200, budget_ms * 1000.0 / max(estimate * graph.calls, 1.0))))
            return Round(graph.samples(reps), "cuda_graph", len(sets), estimate)
        chosen = "cuda_events"
    # The flush costs ~60 µs of GPU time per rep on an H200 (256 MB at ~4.3 TB/s).
    reps = int(max(5, min(2000, budget_ms * 1000.0 / (estimate + 60.0))))
    return Round(_event_samples(fn, sets, reps, flush_l2, 0, audit), chosen, len(sets), estimate)


def _warm_once(fn: Callable[..., Any], sets: list[Sequence[Any]]) -> int:
    """One synchronised call of an fn timed before in this process (its code, caches and clocks
    warm again after another process's round); the bytes of the tensors it returns."""
    _require_cuda()
    out = _guarded(fn)(*sets[0])
    out_bytes = nbytes(_leaves(out))
    del out
    _synchronize()
    return out_bytes


def time_cuda(
    fn: Callable[..., Any],
    *,
    min_reps: int = 20,
    max_time_s: float = 2.0,
    target_spread: float = 0.02,
    flush_l2: bool = True,
    input_sets: Sequence[Sequence[Any]] | Callable[[], Sequence[Any]] | None = None,
    method: Method | Literal["auto"] = "auto",
) -> Timing:
    """Time fn on the current GPU: median, IQR and min per call, in µs.

    fn() is called with no arguments, or fn(*args) with each input set in turn (`input_sets`: a
    list of argument lists, or a builder: with CUDA graphs it is called `rotation_sets()` times so
    the sets exceed L2, see the module docstring). Repeats in batches
    until `min_reps` samples and, for kernels over 50 µs, IQR/median ≤ `target_spread`, or until
    `max_time_s` of wall time. method "auto" picks CUDA graphs below ~20 µs per call.
    """
    deadline = _perf_counter() + max_time_s
    sets = first_sets(input_sets)
    estimate, out_bytes = estimate_us(fn, sets, flush_l2)
    chosen: Method = choose_method(estimate) if method == "auto" else method
    graph: _Graph | None = None
    if chosen == "cuda_graph":
        graph = _graph_or_none(fn, sets, input_sets, estimate, out_bytes, strict=method == "cuda_graph")
        if graph is None:
            chosen = "cuda_events"
    times: list[float] = []
    batch = max(5, min(50, min_reps))
    while True:
        if graph is not None:
            times += graph.samples(batch)
        else:
            times += _event_samples(fn, sets, batch, flush_l2, len(times))
        if len(times) >= min_reps:
            if spread_within(times, target_spread):
                break
        if _perf_counter() >= deadline:
            break
    return summarize(times, chosen, len(sets))
