"""What a shrunk CPU verdict rests on (issue 26, item 3): a reference whose output ignores its
inputs at the shrunk sizes is not a silent pass."""

from __future__ import annotations

import types
from pathlib import Path

import pytest

from kernelcraft.engine.source import reach
from kernelcraft.engine.worker import sizing

SHRUNK = Path(__file__).resolve().parents[2] / "fixtures" / "shrunk"


def _load(source: str, tag: str) -> types.ModuleType:
    module = types.ModuleType(tag)
    exec(compile(source, tag, "exec"), module.__dict__)
    return module


def _plan(name: str) -> sizing.Shrunk:
    src = (SHRUNK / name).read_text()
    task = _load(src, "task")
    return sizing.shrink_for_interpreter(src, task, sizing.measure(task, interpret=True), _load)


def test_the_probe_tells_an_output_that_follows_its_input_from_one_that_does_not() -> None:
    task = _load((SHRUNK / "group_of_one_task.py").read_text(), "task")
    assert sizing.depends_on_inputs(task) is True
    task.num_features = 256  # one channel a group: GroupNorm outputs its bias
    assert sizing.depends_on_inputs(task) is False
    task.get_inputs = lambda: [task.torch.ones(4, 256)]  # the same input twice: it cannot tell
    assert sizing.depends_on_inputs(task) is None


def test_a_task_whose_shrunk_output_ignores_its_input_runs_at_sizes_where_it_does_not() -> None:
    plan = _plan("group_of_one_task.py")
    assert plan.source is None and plan.changes == {}
    assert plan.not_shrunk is not None and "num_features 4096 -> 256" in plan.not_shrunk
    assert "does not depend on its inputs" in plan.not_shrunk and plan.probe is None


def test_a_task_whose_output_ignores_its_input_at_every_size_probed_is_flagged() -> None:
    plan = _plan("max_minus_mean_task.py")
    assert plan.source is not None and plan.changes["in_features"] == [4096, 256]
    assert plan.probe is not None and plan.probe.startswith("warning:")
    assert "cannot tell a kernel from one that ignores its inputs" in plan.probe


@pytest.mark.slow
def test_a_kernel_that_ignores_its_input_fails_where_shrinking_would_have_passed_it(
    evaluator, job_for
) -> None:
    r = evaluator.submit(
        job_for(SHRUNK / "group_of_one_task.py", SHRUNK / "bias_only_triton.py", timeout_s=120, trials=2)
    )
    v = r.verify
    assert v is not None and not v.correct and v.status == "numerical_mismatch", v
    assert any("own sizes" in n and "does not depend on its inputs" in n for n in v.notes), v.notes


@pytest.mark.slow
def test_a_pass_that_cannot_tell_a_kernel_from_one_ignoring_its_inputs_says_so_first(
    evaluator, job_for
) -> None:
    r = evaluator.submit(
        job_for(SHRUNK / "max_minus_mean_task.py", SHRUNK / "zeros_triton.py", timeout_s=120, gpu_check=None)
    )
    v = r.verify
    assert v is not None and v.correct, v
    assert v.notes[0].startswith("warning:") and "ignores its inputs" in v.notes[0], v.notes


CANDIDATE_WITH_SIZE_BRANCHES = """
import torch
import triton


@triton.heuristics({"EVEN": lambda args: args["N"] % 4096 == 0})
@triton.jit
def kernel(x_ptr, N, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    if N > 4096:  # inside a kernel: not host control flow
        pass


class ModelNew(torch.nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        M, N = x.shape
        BLOCK = min(1024, triton.next_power_of_2(N))
        if N <= 4096:
            pass
        for k in range(triton.cdiv(N, 2048)):
            pass
        if self.dim % 3 == 0:
            pass
        if M > N:
            pass
        if x.dim() == 2:
            pass
        return x
"""


def test_branches_on_sizes_that_the_full_size_would_take_another_way_are_named_with_the_sizes() -> None:
    pairs = [("input 1's dim 1", 256, 8192), ("input 1's dim 0", 16, 16)]
    warnings, unknown = reach.unreached(CANDIDATE_WITH_SIZE_BRANCHES, pairs)
    text = "\n".join(warnings)
    assert (
        "line 20 `min(1024, triton.next_power_of_2(N))`: takes argument 2 at the trials' input 1's dim 1 = 256"
        in text
    )
    assert (
        "line 21 `N <= 4096`: is True at the trials' input 1's dim 1 = 256 and False at the task's 8192"
        in text
    )
    assert "line 23 `range(triton.cdiv(N, 2048))`: runs 1 time(s)" in text
    assert "line 6" in text  # the heuristics lambda: args["N"] % 4096 == 0
    assert len(warnings) == 4, warnings  # not the kernel's own `if`, not self.dim % 3, not x.dim()
    assert unknown == ["line 27 `M > N`"]
    assert reach.unreached(CANDIDATE_WITH_SIZE_BRANCHES, [("batch", 16, 16)]) == ([], [])


def test_a_size_read_from_one_dimension_is_tried_only_at_that_dimensions_sizes() -> None:
    # The note: `N > 65535` "at the task's 536870912", where N was the batch (8, never
    # shrunk) and 536870912 the input's element count.
    src = (
        "import torch\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n"
        "        N = x.shape[0]\n        n = x.numel()\n        if N > 65535:\n            pass\n"
        "        if n > 65535:\n            pass\n        return x\n"
    )
    pairs = [
        ("input 1's dim 0", 8, 8),
        ("input 1's dim 1", 256, 67108864),
        ("input 1's numel", 2048, 536870912),
    ]
    warnings, unknown = reach.unreached(src, pairs)
    assert warnings == [
        "line 9 `n > 65535`: is False at the trials' input 1's numel = 2048 and True at the task's 536870912"
    ]
    assert unknown == []


@pytest.mark.slow
def test_a_verdict_at_shrunk_sizes_names_the_host_branch_the_task_sizes_would_take(
    evaluator, job_for
) -> None:
    task = SHRUNK.parent / "large" / "gelu_task.py"
    r = evaluator.submit(job_for(task, SHRUNK / "gelu_branches_on_size_triton.py", timeout_s=60))
    v = r.verify
    assert v is not None and v.correct, v
    note = next(n for n in v.notes if "may take another way" in n)
    assert (
        "line 23 `n <= 1 << 20`: is True at the trials' input 1's numel = 65536" in note
        and "and False at the task's" in note
    ), note
