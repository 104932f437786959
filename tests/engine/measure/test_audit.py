"""The audit of timed calls (`engine/measure/audit.py`): fresh inputs for every timed call, and
outputs kept from calls chosen after they ran. The events protocol runs here on the host clock
(no GPU), as in test_timing_gpu.py; a graph's capture and replay are played by hand."""

from __future__ import annotations

import time
from collections.abc import Sequence

import pytest

torch = pytest.importorskip("torch")

from kernelcraft.engine.measure import timing  # noqa: E402
from kernelcraft.engine.measure.audit import KEEP, TimedAudit  # noqa: E402
from kernelcraft.engine.wire import bounds  # noqa: E402


class _HostEvent:
    def __init__(self, enable_timing: bool = True) -> None:
        self.t = 0.0

    def record(self, stream: object = None) -> None:
        self.t = time.perf_counter()

    def elapsed_time(self, end: _HostEvent) -> float:
        return (end.t - self.t) * 1000.0


@pytest.fixture
def host_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(timing, "_Event", _HostEvent)
    monkeypatch.setattr(timing, "_event_record", _HostEvent.record)
    monkeypatch.setattr(timing, "_event_elapsed", _HostEvent.elapsed_time)
    monkeypatch.setattr(timing, "_synchronize", lambda: None)
    monkeypatch.setattr(timing, "_require_cuda", lambda: None)
    monkeypatch.setattr(timing, "_current_stream", lambda: "harness")
    monkeypatch.setattr(timing, "_flush_l2", lambda: None)
    monkeypatch.setattr(timing, "_overhead", [0.0])
    monkeypatch.setattr(timing, "_gpu_sleep", lambda cycles: None)


def draw(seed: int) -> list[torch.Tensor]:
    return [torch.randn(64, generator=torch.Generator().manual_seed(seed))]


def test_each_timed_call_gets_its_own_fresh_draw_and_the_kept_outputs_are_its_answers(host_clock) -> None:
    seen: list[torch.Tensor] = []

    def fn(x: torch.Tensor) -> torch.Tensor:
        seen.append(x.clone())
        return x * 2.0

    audit = TimedAudit(draw, secret=1234)
    r = timing.sample_round(
        fn, budget_ms=2, method="cuda_events", input_sets=lambda: [torch.zeros(64)], audit=audit
    )
    timed = seen[8:]  # after the 3 warm-up calls and the 5 of the estimate, on the given set
    assert all(not x.any() for x in seen[:8])
    assert audit.calls == len(r.times_us) == len(timed) >= 5
    assert len({tuple(x.tolist()) for x in timed}) == len(timed)  # no two timed calls saw one draw
    assert len(audit.kept) == KEEP and audit.note is None
    for k in audit.kept:
        assert torch.equal(k.output, draw(k.seed)[0] * 2.0)


def test_which_calls_are_kept_is_decided_after_each_call_over_all_of_them(host_clock) -> None:
    positions: list[int] = []
    for secret in range(40):
        seeds: list[int] = []

        def tracing(seed: int, seeds: list[int] = seeds) -> list[torch.Tensor]:
            seeds.append(seed)
            return draw(seed)

        audit = TimedAudit(tracing, secret=secret)
        for _ in range(20):
            args = audit.call_args([torch.zeros(64)])
            audit.called(args[0] + 1.0)
        positions += [seeds.index(k.seed) for k in audit.kept]
    assert min(positions) < 5 and max(positions) >= 15  # early and late calls alike
    assert sum(p >= 10 for p in positions) > len(positions) // 4


def test_a_forward_that_copies_an_earlier_answer_after_a_count_of_calls_keeps_a_wrong_answer(
    host_clock,
) -> None:
    state: dict[str, object] = {"calls": 0, "last": None}

    def cheat(x: torch.Tensor) -> torch.Tensor:
        state["calls"] = int(state["calls"]) + 1  # type: ignore[call-overload]
        if int(state["calls"]) > 10 and state["last"] is not None:  # type: ignore[call-overload]
            return state["last"].clone()  # type: ignore[union-attr]
        out = x * 2.0
        state["last"] = out
        return out

    audit = TimedAudit(draw, secret=7)
    timing.sample_round(
        cheat, budget_ms=2, method="cuda_events", input_sets=lambda: [torch.zeros(64)], audit=audit
    )
    assert audit.kept and any(not torch.equal(k.output, draw(k.seed)[0] * 2.0) for k in audit.kept)


@pytest.mark.parametrize(
    ("given", "why"),
    [
        ([torch.zeros(32)], "draws a (64,) torch.float32 where the timed inputs hold a (32,)"),
        ([torch.zeros(64), 3], "differently nested"),
    ],
)
def test_a_task_whose_draws_cannot_stand_in_for_the_timed_inputs_is_timed_on_them_with_a_note(
    host_clock, given: list[object], why: str
) -> None:
    audit = TimedAudit(draw, secret=3)
    assert audit.call_args(given) is given
    audit.called(torch.zeros(1))
    assert not audit.active and audit.kept == [] and audit.note is not None and why in audit.note


def _capture(audit: TimedAudit, sets: Sequence[list[torch.Tensor]], calls: int, shared: bool) -> list:
    """Capture played by hand: each call's output buffer (one buffer for all calls when `shared`),
    offered to the audit as the timer does."""
    buffer = torch.empty(64)
    captured = []
    for i in range(calls):
        out = buffer if shared else torch.empty(64)
        captured.append((i % len(sets), out))
        audit.captured(i % len(sets), out)
    return captured


def _replay(sets: Sequence[list[torch.Tensor]], captured: list, stale: set[int] = frozenset()) -> None:  # type: ignore[assignment]
    for i, (k, out) in enumerate(captured):
        if i not in stale:  # a stale call replays a copy made at capture: it writes nothing new
            out.copy_(sets[k][0] * 2.0)


@pytest.mark.parametrize("shared", [False, True])
def test_a_graphs_sets_are_refreshed_before_every_replay_and_kept_calls_hold_their_draws_answer(
    shared: bool,
) -> None:
    sets = [[torch.zeros(64)] for _ in range(3)]
    audit = TimedAudit(draw, secret=11)
    captured = _capture(audit, sets, 12, shared)
    before = [s[0].clone() for s in sets]
    for _ in range(3):
        audit.refresh(sets)
        _replay(sets, captured)
    assert all(not torch.equal(a, s[0]) for a, s in zip(before, sets, strict=True))
    audit.replayed()
    assert audit.calls == 3 and len(audit.kept) == KEEP
    for k in audit.kept:  # one buffer for every call: the graph's last call stands in
        assert torch.equal(k.output, draw(k.seed)[0] * 2.0)


def test_a_graph_call_captured_as_a_copy_of_an_earlier_answer_is_kept_wrong() -> None:
    sets = [[torch.zeros(64)] for _ in range(2)]
    audit = TimedAudit(draw, secret=5, keep=8)  # keeps every call: the stale ones among them
    captured = _capture(audit, sets, 8, shared=False)
    audit.refresh(sets)
    _replay(sets, captured, stale={2, 3, 4, 5, 6, 7})
    audit.replayed()
    wrong = [k for k in audit.kept if not torch.equal(k.output, draw(k.seed)[0] * 2.0)]
    assert len(wrong) == 6


def test_a_timed_frame_may_carry_the_kept_outputs_and_no_more() -> None:
    b = bounds.for_task(inputs_bytes=1 << 20, outputs_bytes=1 << 20)
    assert KEEP + 1 == bounds.TIMED_KEPT  # the kept timed calls and the round's witness call
    kept = bounds.TIMED_KEPT * (1 << 20)
    assert kept <= b.blobs["timed"] < kept + (1 << 20) * (1 + bounds.HEADROOM)
    assert bounds.starting().blobs["timed"] == bounds.UNSIZED_BLOB_BYTES


def test_a_task_whose_draws_are_slow_gets_a_shorter_round_not_a_long_one(
    host_clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kernelcraft.engine.measure import audit as audit_module

    monkeypatch.setattr(audit_module, "DRAW_BUDGET_S", 0.02)

    def slow(seed: int) -> list[torch.Tensor]:
        time.sleep(0.01)
        return draw(seed)

    audit = TimedAudit(slow, secret=2)
    r = timing.sample_round(
        lambda x: x * 2.0,
        budget_ms=50,
        method="cuda_events",
        input_sets=lambda: [torch.zeros(64)],
        audit=audit,
    )
    assert audit_module.MIN_CALLS <= len(r.times_us) == audit.calls < 10 and len(audit.kept) == KEEP


def test_a_capture_that_fails_leaves_the_round_to_events_with_a_fresh_reservoir() -> None:
    audit = TimedAudit(draw, secret=9)
    for i in range(50):
        audit.captured(i % 3, torch.zeros(64))
    audit.restart()
    for _ in range(3):
        audit.called(audit.call_args([torch.zeros(64)])[0] * 2.0)
    assert len(audit.kept) == KEEP  # the capture's 50 offers no longer make the events' keeps rare


def test_the_witness_calls_output_is_checked_with_the_kept_ones() -> None:
    audit = TimedAudit(draw, secret=4)
    for _ in range(6):
        audit.called(audit.call_args([torch.zeros(64)])[0] * 2.0)
    seed, drawn = audit.witness_draw()
    assert torch.equal(drawn[0], draw(seed)[0])
    audit.witnessed(seed, drawn[0] * 2.0)
    assert len(audit.kept) == KEEP + 1 and audit.kept[-1].seed == seed
    assert seed not in [k.seed for k in audit.kept[:-1]]
