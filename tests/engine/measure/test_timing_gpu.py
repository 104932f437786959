"""GPU timing primitives. The `gpu` tests run on the H200 machine; the rest run anywhere."""

from __future__ import annotations

import statistics
import time

import pytest

torch = pytest.importorskip("torch")

from kernelcraft.engine.measure import rotation, samples, timing  # noqa: E402

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def test_summarize_gives_median_iqr_and_min() -> None:
    t = samples.summarize([4.0, 1.0, 3.0, 2.0, 5.0], "cuda_events")
    assert (t.median_us, t.min_us, t.reps, t.method) == (3.0, 1.0, 5, "cuda_events")
    assert t.iqr_us == pytest.approx(2.0)
    with pytest.raises(ValueError):
        samples.summarize([], "cuda_events")


def test_patched_timers_are_named(monkeypatch: pytest.MonkeyPatch) -> None:
    assert timing.timing_functions_intact() is None
    monkeypatch.setattr(time, "perf_counter", lambda: 0.0)
    assert timing.timing_functions_intact() == "time.perf_counter"
    monkeypatch.undo()
    monkeypatch.setattr(torch.cuda.Event, "elapsed_time", lambda self, end: 0.001)
    assert timing.timing_functions_intact() == "torch.cuda.Event.elapsed_time"
    monkeypatch.undo()
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    assert timing.timing_functions_intact() == "torch.cuda.synchronize"
    monkeypatch.undo()
    assert timing.timing_functions_intact() is None


@pytest.mark.gpu
@needs_cuda
def test_a_large_copy_is_timed_with_events_within_the_spread_target_at_a_plausible_bandwidth() -> None:
    src = torch.randn(64 * 1024 * 1024, device="cuda")  # 256 MB
    dst = torch.empty_like(src)
    t = timing.time_cuda(lambda: dst.copy_(src), min_reps=20, max_time_s=5.0)
    assert t.method == "cuda_events"
    gbps = 2 * src.numel() * 4 / (t.median_us * 1e-6) / 1e9
    assert 500 < gbps < 6000, f"{gbps:.0f} GB/s is not a plausible device copy bandwidth"
    assert t.iqr_us / t.median_us <= 0.02 or t.reps >= 20


@pytest.mark.gpu
@needs_cuda
def test_the_median_agrees_with_triton_do_bench_within_five_percent() -> None:
    import triton.testing

    a = torch.randn(8192, 8192, device="cuda")
    b = torch.randn(8192, 8192, device="cuda")
    ours = timing.time_cuda(lambda: a + b, min_reps=50, max_time_s=5.0).median_us
    theirs = triton.testing.do_bench(lambda: a + b, warmup=100, rep=500, return_mode="median") * 1000.0
    assert abs(ours - theirs) / theirs < 0.05, (ours, theirs)


@pytest.mark.gpu
@needs_cuda
def test_a_tiny_kernel_is_timed_with_a_cuda_graph() -> None:
    x = torch.randn(4096, device="cuda")
    t = timing.time_cuda(lambda: x.mul_(1.0), min_reps=20, max_time_s=2.0)
    assert t.method == "cuda_graph"
    assert 0 < t.median_us < 15


@pytest.mark.gpu
@needs_cuda
def test_work_hidden_on_a_side_stream_is_caught() -> None:
    a = torch.randn(4096, 4096, device="cuda")
    side = torch.cuda.Stream()

    def honest() -> torch.Tensor:
        return a @ a

    def hidden() -> None:
        with torch.cuda.stream(side):  # returns at once; the matmul runs behind the timer's back
            a @ a

    t_honest = timing.time_cuda(honest, min_reps=20, max_time_s=3.0, method="cuda_events")
    assert t_honest.median_us > 100
    with pytest.raises(timing.WorkEscaped, match="another stream"):
        timing.time_cuda(hidden, min_reps=20, max_time_s=3.0, method="cuda_events")


@pytest.mark.gpu
@needs_cuda
def test_interleaved_rounds_merge_into_one_summary_with_input_rotation() -> None:
    def make() -> list[torch.Tensor]:
        return [torch.randn(1024, 1024, device="cuda")]

    times_us: list[float] = []
    method = "auto"
    for _ in range(3):
        r = timing.sample_round(lambda x: x * 2.0, budget_ms=50, method=method, input_sets=make)
        times, method = r.times_us, r.method
        times_us += times
    t = samples.summarize(times_us, method)
    assert t.reps == len(times_us) >= 15
    assert t.median_us > 0


@pytest.mark.gpu
@needs_cuda
def test_a_round_given_the_first_rounds_estimate_calls_fn_once_before_its_samples() -> None:
    x = torch.randn(4096, 4096, device="cuda")
    calls = 0

    def fn(a: torch.Tensor) -> torch.Tensor:
        nonlocal calls
        calls += 1
        return a * 2.0

    first = timing.sample_round(fn, budget_ms=20, method="cuda_events", input_sets=[[x]])
    assert first.estimate_us > 0 and calls == 8 + len(first.times_us)  # 3 warm, 5 for the estimate
    calls = 0
    again = timing.sample_round(
        fn, budget_ms=20, method="cuda_events", input_sets=[[x]], estimate=first.estimate_us
    )
    assert calls == 1 + len(again.times_us) and again.estimate_us == first.estimate_us
    assert len(again.times_us) == len(first.times_us)  # the same reps: the same budget and estimate
    assert abs(statistics.median(again.times_us) / statistics.median(first.times_us) - 1) < 0.1


class _HostEvent:
    """Stands in for torch.cuda.Event on a CPU: record() reads the host clock."""

    def __init__(self, enable_timing: bool = True) -> None:
        self.t = 0.0

    def record(self, stream: object = None) -> None:
        self.t = time.perf_counter()

    def elapsed_time(self, end: _HostEvent) -> float:
        return (end.t - self.t) * 1000.0


def _busy(us: float) -> None:
    end = time.perf_counter() + us * 1e-6
    while time.perf_counter() < end:
        pass


def test_the_event_protocol_times_between_events_on_the_harness_stream_and_stops_at_the_spread_target(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The protocol's control flow, run on the host clock (no GPU): events become host timestamps.
    monkeypatch.setattr(timing, "_Event", _HostEvent)
    monkeypatch.setattr(timing, "_event_record", _HostEvent.record)
    monkeypatch.setattr(timing, "_event_elapsed", _HostEvent.elapsed_time)
    monkeypatch.setattr(timing, "_synchronize", lambda: None)
    monkeypatch.setattr(timing, "_require_cuda", lambda: None)
    monkeypatch.setattr(timing, "_current_stream", lambda: "harness")
    flushes: list[int] = []
    monkeypatch.setattr(timing, "_flush_l2", lambda: flushes.append(1))
    monkeypatch.setattr(timing, "_overhead", [])
    monkeypatch.setattr(timing, "_gpu_sleep", lambda cycles: None)
    t = timing.time_cuda(lambda: _busy(300), min_reps=10, max_time_s=3.0, method="cuda_events")
    assert t.method == "cuda_events" and t.reps >= 10
    assert 250 < t.median_us < 600, t
    assert len(flushes) >= t.reps
    r = timing.sample_round(
        lambda x: _busy(x), budget_ms=20, method="cuda_events", input_sets=[[100.0], [200.0]]
    )
    times = r.times_us
    assert r.method == "cuda_events" and len(times) >= 5
    assert min(times) > 50 and max(times) > 150  # both input sets were used


def test_rotation_makes_the_sets_together_exceed_l2_within_the_memory_cap() -> None:
    mb = 1024 * 1024
    assert rotation.rotation_sets(33 * mb) == 8  # the softmax example: 8 sets, 264 MB > 4x an H200's L2
    assert rotation.rotation_sets(300 * mb) == 1  # one set already exceeds it
    assert rotation.rotation_sets(1024) == rotation.MAX_ROTATE_SETS
    assert rotation.rotation_sets(0) == 1
    for size in (1, 3 * mb, 33 * mb, 100 * mb, 255 * mb):
        n = rotation.rotation_sets(size)
        assert n * size <= max(size, rotation.ROTATE_MEMORY_BYTES)
        assert n * size >= rotation.ROTATE_TOTAL_BYTES or n == rotation.MAX_ROTATE_SETS


def _host_clock(monkeypatch: pytest.MonkeyPatch, sync_us: float, overhead_us: float) -> None:
    """Events become host timestamps; a synchronise takes `sync_us` (work still running on another
    stream, as far as the protocol can tell); the measured round-trip is `overhead_us`."""
    monkeypatch.setattr(timing, "_Event", _HostEvent)
    monkeypatch.setattr(timing, "_event_record", _HostEvent.record)
    monkeypatch.setattr(timing, "_event_elapsed", _HostEvent.elapsed_time)
    monkeypatch.setattr(timing, "_synchronize", lambda: _busy(sync_us))
    monkeypatch.setattr(timing, "_require_cuda", lambda: None)
    monkeypatch.setattr(timing, "_flush_l2", lambda: None)
    monkeypatch.setattr(timing, "_current_stream", lambda: "harness")
    monkeypatch.setattr(timing, "_overhead", [overhead_us])
    monkeypatch.setattr(timing, "_gpu_sleep", lambda cycles: None)


def test_samples_are_clipped_above_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    _host_clock(monkeypatch, 0.0, 0.0)
    monkeypatch.setattr(timing, "_event_elapsed", lambda a, b: 0.0)
    times = timing._event_samples(lambda: None, [()], 10, True, 0)
    assert all(t == samples.MIN_SAMPLE_US > 0 for t in times)
    t = samples.summarize(times, "cuda_events")
    assert t.median_us > 0 and t.clipped == t.reps == 10


def test_work_that_outlasts_the_timed_stream_raises_work_escaped(monkeypatch: pytest.MonkeyPatch) -> None:
    # The synchronise after fn waits 400 µs more than the round-trip: work was still running
    # elsewhere when fn's work on the harness stream had finished.
    _host_clock(monkeypatch, 400.0, 5.0)
    monkeypatch.setattr(timing, "ESCAPE_RETRY_PAUSE_S", 0.0)
    with pytest.raises(timing.WorkEscaped, match="another stream"):
        timing._event_samples(lambda: _busy(100), [()], 8, True, 0)
    # A stall in one measurement only (another process on the GPU) is not hidden work.
    _host_clock(monkeypatch, 0.0, 5.0)
    syncs = [0]

    def stall_once() -> None:
        syncs[0] += 1
        if syncs[0] <= 10:  # the first measurement's synchronises (8 repetitions + 2)
            _busy(400.0)

    monkeypatch.setattr(timing, "_synchronize", stall_once)
    monkeypatch.setattr(timing, "ESCAPE_RETRY_PAUSE_S", 0.0)
    times = timing._event_samples(lambda: _busy(100), [()], 8, True, 0)
    assert len(times) == 8 and syncs[0] > 10
    # The same wait within the round-trip is an honest fn.
    _host_clock(monkeypatch, 400.0, 400.0)
    times = timing._event_samples(lambda: _busy(100), [()], 8, True, 0)
    assert statistics.median(times) >= 100


def test_a_callable_that_switches_the_current_stream_raises_and_the_stream_is_restored(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    current = ["harness"]
    monkeypatch.setattr(timing, "_current_stream", lambda: current[0])
    monkeypatch.setattr(timing, "_set_stream", lambda s: current.__setitem__(0, s))

    def sneaky() -> None:
        current[0] = "side"

    timing._guarded(lambda: None)()
    with pytest.raises(timing.StreamChanged, match="changed the current CUDA stream"):
        timing._guarded(sneaky)()
    assert current[0] == "harness"


@pytest.mark.gpu
@needs_cuda
def test_the_timer_rejects_a_callable_that_switches_streams_in_both_modes() -> None:
    x = torch.randn(1 << 20, device="cuda")
    harness = torch.cuda.current_stream()

    def sneaky() -> torch.Tensor:
        torch.cuda.set_stream(torch.cuda.Stream())
        return x * 2

    for method in ("cuda_events", "cuda_graph"):
        with pytest.raises(timing.StreamChanged):
            timing.sample_round(sneaky, budget_ms=10, method=method)  # type: ignore[arg-type]
        assert torch.cuda.current_stream() == harness


@pytest.mark.gpu
@needs_cuda
def test_a_graph_rotates_enough_input_sets_that_an_l2_sized_problem_is_timed_from_hbm() -> None:
    # 2 x 16 MB in, 16 MB out: fits the H200's 60 MB L2. Hot-L2 timing would beat HBM bandwidth.
    a = torch.randn(4 * 1024 * 1024, device="cuda")
    b = torch.randn(4 * 1024 * 1024, device="cuda")
    r = timing.sample_round(
        torch.add, budget_ms=50, method="cuda_graph", input_sets=lambda: [a.clone(), b.clone()]
    )
    assert r.method == "cuda_graph" and r.sets == rotation.rotation_sets(48 * 1024 * 1024) > 1
    median = samples.summarize(r.times_us, r.method, r.sets).median_us
    gbps = 48 * 1024 * 1024 / (median * 1e-6) / 1e9
    assert gbps < 4800 * 1.05, f"{gbps:.0f} GB/s is above the H200's HBM bandwidth: L2-hot timing"
