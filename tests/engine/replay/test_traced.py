"""Numbers forward derives from its host reads are traced (`replay/traced.py`), and re-derived by
the fresh replay on its own reads; a number from anywhere else stays the trial's constant."""

from __future__ import annotations

import json

import pytest
import torch

from kernelcraft.engine.replay import traced
from kernelcraft.engine.replay.export import _expression
from kernelcraft.engine.replay.replay import Tape


def _read(tape: Tape, value: float) -> object:
    """A host read of `value` as forward's recorded run gets it: `.item()` under the op recorder
    and the tracer, as the candidate's worker runs them; the tape left open."""
    from kernelcraft.engine.watch.guard import OpRecorder

    t = torch.tensor([value])
    with OpRecorder(frozenset(), tape), traced.ReadTracer(tape):
        got = t.item()
    tape.tracing = True
    return got


def _fresh(expr: object, reads: list[float]) -> object:
    return traced.evaluate(json.loads(json.dumps(_expression(expr))), reads)


def test_a_host_read_under_the_recorder_is_a_traced_number_naming_its_read() -> None:
    tape = Tape()
    a, b = _read(tape, 2.5), _read(tape, 7)
    assert type(a) is traced.TracedFloat and a == 2.5 and a.expr == ("read", 0)
    assert type(b) is traced.TracedInt and b == 7 and b.expr == ("read", 1)
    assert [type(v) for v in (torch.tensor(3.0).item(), float(torch.tensor(3)))] == [float, float]


def test_only_a_forwards_first_reads_are_traced() -> None:
    tape = Tape()
    reads = [_read(tape, float(i)) for i in range(traced.MAX_READS + 2)]
    assert [type(r) for r in reads] == [traced.TracedFloat] * traced.MAX_READS + [float, float]


def test_arithmetic_on_a_read_is_noted_with_its_expression_and_re_derived_on_fresh_reads() -> None:
    tape = Tape()
    tape.tracing = True
    m = _read(tape, 4.0)
    scale = 1.0 / m
    shifted = (m * 2 + 1) ** 2 - abs(-m) // 3
    assert isinstance(scale, traced.TracedFloat) and scale == 0.25
    values = dict(tape.derived)
    assert values[0.25] == ("truediv", ("c", 1.0), ("read", 0))
    assert _fresh(values[0.25], [8.0]) == 0.125
    assert _fresh(scale.expr, [8.0]) == 0.125 and _fresh(shifted.expr, [8.0]) == 17.0**2 - 8.0 // 3


def test_rounding_and_math_floor_ceil_trunc_of_a_read_are_traced() -> None:
    import math

    tape = Tape()
    m = _read(tape, 2.6)
    got = [round(m), math.floor(m * 3), math.ceil(m / 2), math.trunc(-m)]
    assert got == [3, 7, 2, -2] and all(type(g) is traced.TracedInt for g in got)
    assert [_fresh(g.expr, [4.4]) for g in got] == [4, 13, 3, -4]
    assert type(round(m, 1)) is float and type(math.sqrt(m)) is float  # not traced


def test_an_int_read_stays_an_int_through_int_arithmetic() -> None:
    tape = Tape()
    tape.tracing = True
    n = _read(tape, 40)
    blocks = (n + 63) // 64
    assert type(blocks) is traced.TracedInt and blocks == 1
    assert _fresh(blocks.expr, [130]) == 3


def test_a_number_from_the_host_enters_the_expression_as_the_trials_constant() -> None:
    tape = Tape()
    tape.tracing = True
    m = _read(tape, 4.0)
    smuggled = m * 0.0 + 7.5  # 7.5: an answer computed in numpy
    assert _fresh(smuggled.expr, [100.0]) == 7.5


def test_a_traced_number_kept_from_another_run_is_a_constant_and_nothing_is_traced_after_forward() -> None:
    old, new = Tape(), Tape()
    old.tracing = new.tracing = True
    kept = _read(old, 3.0)
    old.tracing = False
    m = _read(new, 5.0)
    mixed = m + kept
    assert mixed.expr == ("add", ("read", 0), ("c", 3.0))
    new.tracing = False
    assert type(m * 2) is float  # after forward's recorded run: plain


def test_a_read_back_number_returned_by_forward_is_frozen_to_a_plain_one() -> None:
    from kernelcraft.engine.worker.freeze import freeze

    tape = Tape()
    m = _read(tape, 3.5)
    got = freeze((m, {"n": _read(tape, 4) * 2}))
    assert got == (3.5, {"n": 8}) and type(got[0]) is float and type(got[1]["n"]) is int


def test_launches_get_plain_numbers() -> None:
    from kernelcraft.engine.watch.launches import _plain

    tape = Tape()
    tape.tracing = True
    m = _read(tape, 40)
    got = _plain((m, [m * 2], {"k": m / 2}))
    assert got == (40, [80], {"k": 20.0})
    assert type(got[0]) is int and type(got[1][0]) is int and type(got[2]["k"]) is float


@pytest.mark.parametrize(
    "expr",
    [
        ["pow", ["c", {"i": 10}], ["c", {"i": 10**6}]],
        ["read", 3],
        ["system", ["c", {"i": 1}]],
        ["add", ["c", {"s": "x"}], ["c", {"i": 1}]],
        "read",
    ],
    ids=["huge-power", "read-out-of-range", "unknown-op", "not-a-number", "malformed"],
)
def test_an_expression_the_reference_cannot_evaluate_is_refused(expr: object) -> None:
    with pytest.raises(traced.Unevaluable):
        traced.evaluate(expr, [1.0])


def test_the_tracers_handler_is_trusted_on_the_path_of_an_op_triton_issues_in_a_launch() -> None:
    """Each op Triton issues during a launch (the autotuner's benchmarking on a GPU) passes through
    the tracer's handler: without it in the trusted code, those ops were forward's compute."""
    from kernelcraft.engine.watch import trusted

    trusted._trusted_code.clear()  # (taken again here, with this module loaded, as a worker does)
    trusted.trust_triton()
    code = traced.ReadTracer.__torch_function__.__code__
    assert trusted.table().get(code) is vars(traced)
