"""What a fresh `kernelcraft verify` pays before its verdict, in the evaluator's process. It never
imports torch (5.3 s on the loaded 2-core container, on the path of every first verdict): what it
does with a candidate's record, its compile facts and its kept kernels, it does on plain data. And
the compile pool's zygote starts when a job that compiles is submitted, not when it compiles."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]

PROBE = r"""
import ast, sys
from pathlib import Path
from typing import Any
from kernelcraft.engine.host import local  # noqa: F401
from kernelcraft.engine.host.job import compile, replay  # noqa: F401
from kernelcraft.engine.host.compilefacts import CompileFacts
from kernelcraft.engine.machine.kernelcache import KernelCache
from kernelcraft.schema.evaluation import EvalJob

source = Path(sys.argv[1]).read_text()
tree = ast.parse(source)
kernel = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.decorator_list)
text = ast.get_source_segment(source, kernel)
program = {"kernels": [{"name": kernel.name, "source": text[text.index("def "):], "globals": {}}]}
assert replay.held_to_source(program, source) is None, replay.held_to_source(program, source)
assert replay.held_to_source({"kernels": [{"name": "k", "source": "def k(): pass", "globals": {}}]}, source)
CompileFacts().recorded(program, "sm_90a")
KernelCache.key(EvalJob(task_source="t", candidate_source=source), "cpu")
print("torch" in sys.modules, "triton" in sys.modules)
"""


def test_reading_a_candidates_record_in_the_evaluators_process_imports_no_torch() -> None:
    seed = REPO / "examples" / "elementwise" / "seed.py"
    p = subprocess.run(
        [sys.executable, "-c", PROBE, str(seed)], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.split() == ["False", "False"], p.stdout


def test_a_cpu_job_that_will_compile_starts_the_compile_pools_zygote_when_it_is_submitted(
    monkeypatch: Any,
) -> None:
    """Its zygote imports torch and Triton (seconds): started at submission, beside the trials, it
    is ready when the GPU check comes (a cold CPU verify of elementwise: 21.5-22.0 s -> 12.8-15.2 s).
    A job that compiles nothing leaves it alone."""
    import asyncio

    from kernelcraft.base import knobs
    from kernelcraft.engine.host.local import LocalEvaluator
    from kernelcraft.engine.machine.pool import WorkerPool
    from kernelcraft.schema.evaluation import EvalJob, EvalResult

    warmed: list[bool] = []
    monkeypatch.setattr(WorkerPool, "warm_up", lambda self: warmed.append(self.interpret))

    async def run() -> None:
        ev = LocalEvaluator(
            settings=knobs.settings(), workers=2, device="cpu", lazy=True, protect_environ=False
        )

        async def ran(*_a: Any) -> EvalResult:
            return EvalResult()

        monkeypatch.setattr(ev, "_run", ran)
        seed = (REPO / "examples" / "elementwise" / "seed.py").read_text()
        task = (REPO / "examples" / "elementwise" / "task.py").read_text()
        for spec in (
            EvalJob(task_source=task, candidate_source=seed, stages=["verify"], gpu_check=None),
            EvalJob(task_source=task, candidate_source=seed, stages=["verify"], gpu_check="sm_90a"),
            EvalJob(task_source=task, candidate_source=seed, stages=["compile"], targets=["sm_90a"]),
        ):
            await ev.submit(spec)
        await ev.aclose()

    asyncio.run(run())
    # the interpreter pool at the first start; then the compile pool (no interpreter) for the two
    # jobs that compile, and not for the first
    assert warmed == [True, False, False]
