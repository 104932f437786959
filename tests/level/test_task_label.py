"""Trees are named after their task's operator when the client gives no file name (search/task.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelcraft.search.task import task_label

REPO = Path(__file__).resolve().parents[2]

KERNELBENCH_MATMUL = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    """Simple model that performs a single square matrix multiplication (C = A * B)."""

    def forward(self, A, B):
        return A @ B
'''


@pytest.mark.parametrize(
    ("task", "label"),
    [
        ("examples/layernorm/task.py", "LayerNorm"),  # self.norm = nn.LayerNorm(...) in __init__
        ("examples/matmul_epilogue/task.py", "Linear + silu"),  # F.silu(self.linear(x)): in run order
        ("examples/softmax/task.py", "softmax"),
        ("examples/row_mean/task.py", "mean"),
        ("examples/embedding_bag/task.py", "EmbeddingBag"),
        ("examples/elementwise/task.py", "gelu"),
        ("bench/tasks/scaled_add.py", "A scaled residual add"),  # no call: the docstring
        ("tests/fixtures/tasks/vector_add.py", "add"),  # no call, no docstring: the arithmetic
    ],
)
def test_a_task_is_named_after_what_its_forward_computes(task: str, label: str) -> None:
    assert task_label((REPO / task).read_text()) == label


def test_the_matmul_operator_names_a_task_whose_docstring_is_boilerplate() -> None:
    assert task_label(KERNELBENCH_MATMUL) == "matmul"
    without = KERNELBENCH_MATMUL.replace("return A @ B", "return A")
    assert task_label(without) == "Simple model that performs a single square matrix…"


def test_a_task_that_does_not_parse_is_named_task() -> None:
    assert task_label("class Model(:\n") == "task"
    assert task_label("") == "task"
