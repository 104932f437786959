"""Tasks and candidates are checked before any process starts; unusable files name file and line."""

from __future__ import annotations

import ast

import pytest

from kernelcraft.base.errors import TaskError
from kernelcraft.engine.source.intake import check_candidate, check_task
from kernelcraft.engine.source.static import check_candidate_source

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

    for seed in (Path(__file__).parents[3] / "examples").glob("*/seed.py"):
        assert check_candidate_source(check_candidate(seed.read_text(), str(seed))) == []


def _counting_parse(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Count the intake's parses (the names it parsed)."""
    from kernelcraft.engine.source import intake

    parsed: list[str] = []
    real = intake.parse

    def counting(source: str, path: str) -> ast.Module:
        parsed.append(path)
        return real(source, path)

    monkeypatch.setattr(intake, "parse", counting)
    intake._kept.cache_clear()
    return parsed


def test_a_source_checked_twice_is_parsed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from kernelcraft.engine.source.intake import task_source

    parsed = _counting_parse(monkeypatch)
    first = check_task(KERNELBENCH_RELU, "19_ReLU.py")  # the command line's check
    again = task_source(KERNELBENCH_RELU, "19_ReLU.py")  # the evaluator's, for the same job
    assert parsed == ["19_ReLU.py"] and again.tree is first
    check_task(KERNELBENCH_RELU + "\n# edited\n", "19_ReLU.py")  # another text is another source
    assert parsed == ["19_ReLU.py", "19_ReLU.py"]


def test_a_source_over_the_kept_size_is_parsed_at_each_check(monkeypatch: pytest.MonkeyPatch) -> None:
    from kernelcraft.engine.source import intake

    parsed = _counting_parse(monkeypatch)
    big = KERNELBENCH_RELU + "#" * intake.KEPT_BYTES + "\n"
    check_task(big, "big.py")
    check_task(big, "big.py")
    assert parsed == ["big.py", "big.py"] and intake._kept.cache_info().currsize == 0


def test_a_source_that_is_not_a_task_is_refused_at_every_check(monkeypatch: pytest.MonkeyPatch) -> None:
    parsed = _counting_parse(monkeypatch)
    for _ in range(2):
        with pytest.raises(TaskError, match="get_inputs"):
            check_task("class Model:\n    pass\n", "t.py")
    assert parsed == ["t.py", "t.py"]


def test_take_in_checks_a_jobs_sources_and_runs_the_static_rules_over_the_candidate() -> None:
    from kernelcraft.engine.source.intake import take_in
    from kernelcraft.schema.evaluation import EvalJob

    cheat = "import threading\nimport torch\nclass ModelNew(torch.nn.Module):\n    pass\n"
    job = EvalJob(
        task_source=KERNELBENCH_RELU, candidate_source=cheat, task_name="t.py", candidate_name="c.py"
    )
    intake = take_in(job)
    assert intake.task.name == "t.py" and intake.candidate is not None and intake.candidate.name == "c.py"
    assert intake.findings[0].construct == "import threading"
    assert intake.findings == tuple(check_candidate_source(intake.candidate.tree))
    baseline = take_in(EvalJob(task_source=KERNELBENCH_RELU, stages=["baseline"]))
    assert baseline.candidate is None and baseline.findings == ()
    with pytest.raises(TaskError, match="ModelNew"):
        take_in(EvalJob(task_source=KERNELBENCH_RELU, candidate_source="x = 1\n"))
