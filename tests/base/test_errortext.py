"""The candidate's part of an error text (kernelcraft/base/errortext.py), on texts captured from
the engine (tests/fixtures/errors/tracebacks/) and from Triton (tests/fixtures/errors/triton-3.9/)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelcraft.base.errortext import (
    CANDIDATE_FILE,
    candidate_part,
    error_line,
    exception_text,
    parse,
    pointed_names,
)
from kernelcraft.base.failures import FailureClass, classify, diagnosis

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "errors"
TRACEBACKS = FIXTURES / "tracebacks"


def traceback_text(case: str) -> str:
    return (TRACEBACKS / f"{case}.txt").read_text(encoding="utf-8")


def triton_text(name: str) -> str:
    return (FIXTURES / "triton-3.9" / f"{name}.txt").read_text(encoding="utf-8")


def traceback_cases() -> list[tuple[str, str]]:
    rows = (TRACEBACKS / "index.tsv").read_text(encoding="utf-8").splitlines()[1:]
    return [(row.split("\t")[0], row.split("\t")[1]) for row in rows]


TANH = traceback_text("interp_tl_tanh")


def test_the_captured_tracebacks_are_whole_tracebacks_full_of_framework_frames() -> None:
    # What made the rulebook credit a tl.tanh failure to the torch.exp rule.
    assert "torch/nn/modules/module.py" in TANH and "kernelcraft/engine/worker/main.py" in TANH
    assert len(traceback_cases()) >= 8


def test_error_line_quotes_the_candidates_line_and_the_exception_not_the_traceback_header() -> None:
    assert error_line(TANH) == (
        "line 14, in scaled_add_kernel: tl.store(out_ptr + offs, tl.tanh(scale * x) + y, mask=mask)"
        " — AttributeError: module 'triton.language' has no attribute 'tanh'"
    )


def test_error_line_points_at_the_kernel_line_a_compilation_error_quotes() -> None:
    assert error_line(triton_text("tl_tanh_missing")) == (
        "line 4 of k_tl_tanh: tl.store(x_ptr + offs, tl.tanh(x), mask=offs < n)"
        """ — AttributeError("module 'triton.language' has no attribute 'tanh'")"""
    )


def test_error_line_of_nested_compilation_errors_quotes_the_kernel_and_the_first_cause() -> None:
    # Triton's own tl.zeros is quoted first, the candidate's kernel last; only the cause says why.
    assert error_line(triton_text("zeros_not_power_of_two")) == (
        "line 2 of k_zeros_not_pow2: acc = tl.zeros((100,), dtype=tl.float32)"
        " — ValueError: Shape element 0 must be a power of 2"
    )


def test_error_line_of_a_text_without_a_traceback_is_its_first_line() -> None:
    assert error_line("forward launched no Triton kernel\nsecond line") == "forward launched no Triton kernel"
    assert error_line("") == ""


def test_candidate_part_keeps_the_candidates_frames_and_every_exception_only() -> None:
    part = candidate_part(TANH)
    assert "torch/nn/modules" not in part and "worker/main.py" not in part and "interpreter.py" not in part
    assert f'File "{CANDIDATE_FILE}", line 14, in scaled_add_kernel' in part
    assert f'File "{CANDIDATE_FILE}", line 26, in forward' in part
    assert "AttributeError: module 'triton.language' has no attribute 'tanh'" in part
    assert part.rstrip().endswith(
        """InterpreterError: AttributeError("module 'triton.language' has no attribute 'tanh'")"""
    )
    assert "The above exception was the direct cause of the following exception:" in part


@pytest.mark.parametrize(("case", "cls"), traceback_cases())
def test_the_candidate_part_reads_like_the_whole_text(case: str, cls: str) -> None:
    text = traceback_text(case)
    part = candidate_part(text)
    assert len(part) < len(text) / 2
    assert candidate_part(part) == part
    assert error_line(part) == error_line(text) and pointed_names(part) == pointed_names(text)
    assert classify(part) is classify(text) is FailureClass(cls)


def test_a_text_without_frames_passes_through_whole() -> None:
    text = triton_text("dot_1d_operands")
    assert candidate_part(text) == text and exception_text(text) == text


def test_exception_text_leaves_out_every_frame_and_its_code() -> None:
    words = exception_text(TANH)
    assert "File " not in words and "tl.store" not in words and "^^^" not in words
    assert words.count("has no attribute 'tanh'") == 2


def test_diagnosis_of_a_traceback_ignores_words_in_the_frameworks_frames() -> None:
    # A path or a code line of the harness that says "out of bounds" or "timed out" is not the error.
    poisoned = TANH.replace("self.fn(**args)", "self.fn(**args)  # out of bounds? timed out?")
    assert "out of bounds" not in diagnosis(poisoned)
    assert classify(poisoned) is FailureClass.COMPILE_UNKNOWN_API


def test_a_trimmed_traceback_keeps_its_frames_apart_from_its_exception() -> None:
    # search/tree.py cuts the middle out of a long text; engine/worker/main.py keeps the tail after "…".
    middle = len(TANH) // 2
    cut = f"{TANH[:middle]}\n… [123 characters cut] …\n{TANH[middle + 40 :]}"
    tail = "…" + TANH[300:]
    for text in (cut, tail):
        assert not any(
            line.startswith(("ernel", "ite-packages")) for b in parse(text) for line in b.exception
        )
    assert error_line(cut) == error_line(TANH)


@pytest.mark.parametrize(
    ("text", "names"),
    [
        (traceback_text("interp_tl_tanh"), ["tl.tanh"]),
        (traceback_text("interp_math_tanh"), ["tl.math.tanh"]),
        (traceback_text("interp_torch_exp"), ["torch.exp"]),
        (triton_text("tl_libdevice_missing"), ["tl.libdevice.tanh", "tl.libdevice"]),
        (triton_text("pointer_subscript"), ["x_ptr"]),
        (triton_text("tensor_constant_index"), ["x"]),
        (triton_text("max_used_as_maximum"), ["tl.max"]),
        ("RuntimeError: something broke", []),
    ],
)
def test_pointed_names_are_what_the_caret_and_the_message_name(text: str, names: list[str]) -> None:
    assert pointed_names(text) == names
