"""The failure classifier on real error texts captured from Triton (tests/fixtures/errors/)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelcraft.base.failures import FailureClass, classify, diagnosis

FIXTURES = Path(__file__).parents[1] / "fixtures" / "errors"


def _cases() -> list[tuple[str, str, str, str]]:
    out = []
    for index in sorted(FIXTURES.glob("triton-*/index.tsv")):
        version = index.parent.name
        for line in index.read_text(encoding="utf-8").splitlines()[1:]:
            name, stage, expected, result = line.split("\t")
            if result == "error":
                out.append((version, name, stage, expected))
    return out


CASES = _cases()


def test_fixtures_exist_for_triton_3_9_with_at_least_40_failing_kernels() -> None:
    assert sum(1 for c in CASES if c[0] == "triton-3.9") >= 40


@pytest.mark.parametrize(
    ("version", "name", "stage", "expected"), CASES, ids=[f"{c[0]}/{c[1]}" for c in CASES]
)
def test_classify_maps_a_captured_error_text_to_its_expected_class(
    version: str, name: str, stage: str, expected: str
) -> None:
    text = (FIXTURES / version / f"{name}.txt").read_text(encoding="utf-8")
    assert classify(text, stage or None) is FailureClass(expected)


def _is_compiler_text(c: tuple[str, str, str, str]) -> bool:
    text = (FIXTURES / c[0] / f"{c[1]}.txt").read_text(encoding="utf-8")
    return c[2] == "compile" and ("Error: at " in text or "InterpreterError" in text)


COMPILER_TEXTS = [c for c in CASES if _is_compiler_text(c)]


@pytest.mark.parametrize(
    ("version", "name", "stage", "expected"), COMPILER_TEXTS, ids=[f"{c[0]}/{c[1]}" for c in COMPILER_TEXTS]
)
def test_classify_needs_no_stage_for_a_compiler_error(
    version: str, name: str, stage: str, expected: str
) -> None:
    text = (FIXTURES / version / f"{name}.txt").read_text(encoding="utf-8")
    assert classify(text) is FailureClass(expected)


def test_classify_reads_the_diagnosis_not_the_quoted_kernel_source() -> None:
    text = (FIXTURES / "triton-3.9" / "break_in_loop.txt").read_text(encoding="utf-8")
    # Put a tl.dot and "shared memory" in the quoted source: they must not change the class.
    poisoned = text.replace("    acc = 0.0\n", "    acc = tl.dot(a, b)  # shared memory too big\n")
    assert "tl.dot" in poisoned
    assert "tl.dot" not in diagnosis(poisoned)
    assert classify(poisoned, "compile") is FailureClass.COMPILE_UNSUPPORTED


def test_a_compile_stage_text_never_gets_a_runtime_class() -> None:
    assert classify("something went out of bounds in the frontend", "compile") is FailureClass.COMPILE_ERROR
    assert (
        classify("illegal memory access was encountered", "runtime")
        is FailureClass.RUNTIME_ILLEGAL_MEMORY_ACCESS
    )


def test_a_runtime_stage_text_never_gets_a_compile_class_except_shared_memory() -> None:
    interp = (FIXTURES / "triton-3.9" / "interp_missing_argument.txt").read_text(encoding="utf-8")
    assert classify(interp, "runtime") is FailureClass.RUNTIME_ERROR
    # Triton's launch-time check of a kernel's shared memory (text of triton/runtime/errors.py).
    text = (
        "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 262144, "
        "Hardware limit: 232448. Reducing block sizes or `num_stages` may help."
    )
    assert classify(text, "runtime") is FailureClass.COMPILE_OUT_OF_SHARED_MEMORY
    assert classify(text) is FailureClass.COMPILE_OUT_OF_SHARED_MEMORY


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # The CUDA runtime's own messages as torch reports them (cudaGetErrorString texts).
        (
            "RuntimeError: CUDA error: an illegal memory access was encountered",
            "runtime_illegal_memory_access",
        ),
        ("RuntimeError: CUDA error: misaligned address", "runtime_misaligned_address"),
        ("RuntimeError: CUDA error: too many resources requested for launch", "runtime_out_of_resources"),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "runtime_out_of_memory"),
        ("the candidate did not finish within 60 s", "runtime_timeout"),
        ("the candidate process died: Segmentation fault (core dumped)", "runtime_crash"),
        ("ValueError: something unexpected", "runtime_error"),
    ],
)
def test_classify_maps_runtime_texts(text: str, expected: str) -> None:
    assert classify(text, "runtime") is FailureClass(expected)


def test_lds_only_matches_as_a_word() -> None:
    # "holds"/"fields" contain "lds"; they are not AMD's local data share.
    assert classify("TypeError: the struct holds two fields", "compile") is FailureClass.COMPILE_TYPE_ERROR


def test_classify_is_deterministic_and_total() -> None:
    for version, name, stage, _ in CASES:
        text = (FIXTURES / version / f"{name}.txt").read_text(encoding="utf-8")
        assert classify(text, stage or None) is classify(text, stage or None)
    assert classify("", None) is FailureClass.RUNTIME_ERROR
    assert classify("", "load") is FailureClass.LOAD_ERROR
    assert classify("", "compile") is FailureClass.COMPILE_ERROR


def test_every_class_knows_its_stage() -> None:
    for cls in FailureClass:
        assert cls.stage in ("load", "compile", "runtime", "verify", "harness")
    assert FailureClass.NUMERICAL_MISMATCH.compiled
    assert not FailureClass.COMPILE_DOT.compiled
