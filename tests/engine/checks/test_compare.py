"""The output comparison (engine/checks/compare.py), in chunks: the same verdict and evidence whatever the
chunk size, so an output of 1.6 G elements is judged in bounded memory exactly as a small one."""

from __future__ import annotations

import json

import pytest
import torch

from kernelcraft.base.failures import FailureClass
from kernelcraft.engine.checks import compare


def _cases() -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    ref = torch.randn(5, 9, generator=g)
    far = ref.clone()
    far[3, 7] += 1.0
    far[4, 2] -= 2.0
    nan_out = ref.clone()
    nan_out[2, 1] = float("nan")
    nan_both_ref = ref.clone()
    nan_both_ref[1, 4] = float("nan")
    tiny = torch.full((5, 9), 1e-6)
    ints = torch.arange(45).reshape(5, 9)
    ints_off = ints.clone()
    ints_off[4, 8] = -1
    return [
        ("equal", ref, ref.clone()),
        ("two far values", ref, far),
        ("nan where the reference is finite", ref, nan_out),
        ("nan matching nan", nan_both_ref, nan_both_ref.clone()),
        ("nan missing where the reference has one", nan_both_ref, ref.clone()),
        ("zeros for a near-zero reference", tiny, torch.zeros(5, 9)),
        ("integers equal", ints, ints.clone()),
        ("an integer off in the last chunk", ints, ints_off),
    ]


@pytest.mark.parametrize(("name", "ref", "out"), _cases(), ids=[c[0] for c in _cases()])
def test_a_verdict_and_its_evidence_do_not_depend_on_the_chunk_size(
    monkeypatch: pytest.MonkeyPatch, name: str, ref: torch.Tensor, out: torch.Tensor
) -> None:
    whole = compare.compare_one(ref, out)
    monkeypatch.setattr(compare, "CHUNK", 7)  # 45 elements: seven chunks, the last one short
    chunked = compare.compare_one(ref, out)
    if whole is None or chunked is None:
        assert whole is chunked is None, (whole, chunked)
        return
    assert whole[0] == chunked[0]
    a, b = whole[1].model_dump(), chunked[1].model_dump()
    for key in ("relative_l2_error", "max_abs_error", "max_rel_error"):
        if a[key] is not None:
            assert b[key] == pytest.approx(a[key], rel=1e-12), key
        a.pop(key), b.pop(key)
    assert json.dumps(a) == json.dumps(b)  # NaN evidence compares as text


def test_the_verdicts_say_what_is_wrong_and_where(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compare, "CHUNK", 7)
    verdicts = {name: compare.compare_one(ref, out) for name, ref, out in _cases()}
    assert verdicts["equal"] is None and verdicts["nan matching nan"] is None
    assert verdicts["integers equal"] is None
    cls, ev = verdicts["two far values"] or (None, None)
    assert cls is FailureClass.NUMERICAL_MISMATCH and ev is not None
    assert ev.message.startswith("2 of 45 output values differ") and ev.first_mismatch_index == [3, 7]
    assert ev.max_abs_error == pytest.approx(2.0)
    cls, ev = verdicts["nan where the reference is finite"] or (None, None)
    assert cls is FailureClass.NAN_OR_INF and ev is not None and ev.first_mismatch_index == [2, 1]
    cls, _ = verdicts["nan missing where the reference has one"] or (None, None)
    assert cls is FailureClass.NUMERICAL_MISMATCH
    cls, ev = verdicts["zeros for a near-zero reference"] or (None, None)
    assert cls is FailureClass.NUMERICAL_MISMATCH and ev is not None and "relative L2 error 1" in ev.message
    cls, ev = verdicts["an integer off in the last chunk"] or (None, None)
    assert cls is FailureClass.NUMERICAL_MISMATCH and ev is not None
    assert ev.first_mismatch_index == [4, 8] and ev.expected == 44 and ev.actual == -1


def test_a_write_into_an_input_is_found_in_any_chunk(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compare, "CHUNK", 7)
    before = torch.randn(6, 6)
    after = before.clone()
    assert compare.inputs_changed([before, 3], [after, 3]) is None
    after[5, 4] = 123.0
    ev = compare.inputs_changed([before], [after])
    assert ev is not None and ev.first_mismatch_index == [5, 4] and ev.actual == 123.0


def test_inputs_are_right_untouched_or_as_a_model_that_writes_them_left_them_and_never_otherwise() -> None:
    """A Model whose forward writes its input (`x.mul_(2)`) lets the candidate do the same, within
    the tolerance its arithmetic rounds to; a write Model did not make, or another than Model's,
    is still `inputs_mutated`'s evidence."""
    before = torch.randn(64)
    doubled = before * 2
    nearly = doubled * (1 + 1e-7)
    assert compare.inputs_left_wrong([before], [doubled], [before.clone()], "kernelcraft") is None
    assert compare.inputs_left_wrong([before], [doubled], [nearly], "kernelcraft") is None
    tripled = compare.inputs_left_wrong([before], [doubled], [before * 3], "kernelcraft")
    assert tripled is not None and "wrote into input 0" in tripled.message
    assert compare.inputs_left_wrong([before], None, [doubled], "kernelcraft") is not None


def test_a_mismatch_names_its_worst_element_with_both_values_and_its_error_over_tolerance() -> None:
    _, ref, far = _cases()[1]
    verdict = compare.compare_one(ref, far)
    assert verdict is not None
    ev = verdict[1]
    tol = 1e-4 + 1e-4 * abs(float(ref[4, 2]))
    assert ev.error_over_tolerance == pytest.approx(2.0 / tol, rel=1e-3)
    assert f"at [4, 2]: expected {float(ref[4, 2]):.6g}, got {float(far[4, 2]):.6g}" in ev.message


def test_a_pass_reports_its_margin_and_one_within_2x_of_the_tolerance_says_so() -> None:
    from kernelcraft.engine.checks.margins import Worst

    ref = torch.ones(4, 8)
    out = ref.clone()
    out[1, 3] += 0.6 * 2e-4  # 0.6 of atol + rtol * |1|
    margins: list[compare.Margin] = []
    assert compare.compare_outputs([ref], [out], margins=margins) is None
    (m,) = margins
    assert m.ratio == pytest.approx(0.6, rel=1e-3) and m.index == [1, 3]
    worst = Worst()
    worst.add({"ratio": 0.1, "l2_ratio": 0.0, "text": "fine"}, done=0)
    worst.add({"ratio": m.ratio, "l2_ratio": m.l2_ratio, "text": m.text()}, done=3)
    worst.add({"ratio": "nonsense"}, done=4)
    (note,) = worst.notes()
    assert note.startswith("near the tolerance") and "at [1, 3]" in note and "(trial 4)" in note
    calm = Worst()
    calm.add({"ratio": 0.1, "l2_ratio": 0.2, "text": "worst error 0.1x"}, done=0)
    assert calm.notes() == ["margin: worst error 0.1x (trial 1)"]
