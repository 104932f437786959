"""The evaluator's process never imports torch (seconds of a fresh `kernelcraft verify`: 5.3 s on the
loaded 2-core container, on the path of every first verdict): what it does with a candidate's
record, its compile facts and its kept kernels, it does on plain data."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

PROBE = r"""
import ast, sys
from pathlib import Path
from kernelcraft.engine.host import freshreplay, jobcompile, local  # noqa: F401
from kernelcraft.engine.host.compilefacts import CompileFacts
from kernelcraft.engine.machine.kernelcache import KernelCache
from kernelcraft.schema.evaluation import EvalJob

source = Path(sys.argv[1]).read_text()
tree = ast.parse(source)
kernel = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.decorator_list)
text = ast.get_source_segment(source, kernel)
program = {"kernels": [{"name": kernel.name, "source": text[text.index("def "):], "globals": {}}]}
assert freshreplay.held_to_source(program, source) is None, freshreplay.held_to_source(program, source)
assert freshreplay.held_to_source({"kernels": [{"name": "k", "source": "def k(): pass", "globals": {}}]}, source)
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
