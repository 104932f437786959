"""A job's parts share one `JobState` and reach each other only through operations (issue 40)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import kernelcraft.engine.host as host

HOST = Path(host.__file__).parent

# The parts, and how each names the others in its source.
PARTS = {
    "job/admission.py": ("jw",),
    "job/run.py": ("self.workers", "self.timing"),
    "job/compile.py": ("self.workers",),
    "job/timing.py": ("self.workers",),
    "job/replay.py": ("workers",),
}


def attribute_reads(source: str, names: tuple[str, ...]) -> list[str]:
    """`name.attr` in `source` (for each dotted `name`) that is not called: a part's state read."""
    tree = ast.parse(source)
    called = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    return [
        f"line {node.lineno}: {ast.unparse(node)}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and ast.unparse(node.value) in names and id(node) not in called
    ]


@pytest.mark.parametrize("module", sorted(PARTS))
def test_no_part_of_a_job_reads_another_parts_attributes(module: str) -> None:
    reads = attribute_reads((HOST / module).read_text(encoding="utf-8"), PARTS[module])
    assert not reads, f"{module} reads another part's state (put the fact in JobState): {reads}"


def test_the_check_sees_a_read_of_another_parts_state() -> None:
    source = "def f(self):\n    self.workers.inputs(0)\n    return self.workers.notes\n"
    assert attribute_reads(source, ("self.workers",)) == ["line 3: self.workers.notes"]


@pytest.mark.anyio
async def test_a_jobs_parts_hold_the_one_state_the_job_built() -> None:
    from types import SimpleNamespace

    from kernelcraft.engine.host.job.run import Job
    from kernelcraft.engine.host.job.state import CandidateSettings
    from kernelcraft.schema.evaluation import EvalJob

    device = SimpleNamespace(kind="cpu", index=None)
    spec = EvalJob(task_source="x", candidate_source="y", stages=["verify"])
    job = Job(spec, device, None, CandidateSettings(None, sandbox=False), set(), None)  # type: ignore[arg-type]
    assert job.workers.state is job.state and job.timing.state is job.state
    assert job.state.interpret and job.state.task_source == "x" and job.state.key[1] is None
