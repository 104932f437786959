"""Tasks and candidates are checked before any process starts; unusable files name file and line."""

from __future__ import annotations

import pytest

from kernelcraft.base.errors import TaskError
from kernelcraft.engine.checks.static import check_candidate_source
from kernelcraft.engine.worker.loading import check_candidate, check_task

KERNELBENCH_RELU = '''import torch
import torch.nn as nn

class Model(nn.Module):
    """
    Simple model that performs a ReLU activation.
    """
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)

batch_size = 16
dim = 1024

def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]

def get_init_inputs():
    return []  # No special initialization inputs needed
'''


def test_a_kernelbench_task_is_accepted_unchanged() -> None:
    check_task(KERNELBENCH_RELU, "19_ReLU.py")


def test_a_task_without_get_inputs_names_the_file() -> None:
    with pytest.raises(TaskError, match=r"t\.py:1: .*get_inputs"):
        check_task(KERNELBENCH_RELU.replace("def get_inputs", "def get_things"), "t.py")


def test_a_syntax_error_names_file_and_line() -> None:
    with pytest.raises(TaskError) as e:
        check_candidate("import torch\n\nclass ModelNew(:\n    pass\n", "cand.py")
    assert e.value.path == "cand.py" and e.value.line == 3 and "cand.py:3" in str(e.value)


def test_a_candidate_without_modelnew_is_refused() -> None:
    with pytest.raises(TaskError, match="ModelNew"):
        check_candidate("class Model:\n    pass\n", "cand.py")


def test_names_defined_under_a_module_level_if_count() -> None:
    check_candidate(
        "import sys\nif sys.version_info >= (3, 10):\n    class ModelNew:\n        pass\n", "c.py"
    )


@pytest.mark.parametrize(
    ("snippet", "construct"),
    [
        ("import threading\n", "import threading"),
        ("import torch\ns = torch.cuda.Stream()\n", "torch.cuda.Stream"),
        ("import torch\ntorch.allclose = None\n", "torch.allclose"),
        ("import os\nos.environ.get('X')\n", "os.environ"),
        ("import os\nos._exit(0)\n", "os._exit"),
        ("from task import Model\n", "from task import Model"),
        ("import sys\nsys.modules['task']\n", "sys.modules"),
        ("import torch\nsetattr(torch, 'rand', None)\n", "setattr"),
    ],
)
def test_static_checks_find_forbidden_constructs(snippet: str, construct: str) -> None:
    tree = check_candidate(snippet + "\nclass ModelNew:\n    pass\n", "c.py")
    findings = check_candidate_source(tree)
    assert findings and findings[0].construct == construct and findings[0].line >= 1


def test_static_checks_leave_an_honest_candidate_alone() -> None:
    from pathlib import Path

    for seed in (Path(__file__).parents[2] / "examples").glob("*/seed.py"):
        assert check_candidate_source(check_candidate(seed.read_text(), str(seed))) == []
