"""The search-tree tests' scripted evaluator (`bench/scripted.py`, shared with the benchmarks)
and the tiny task they search over."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: `bench` below it

from bench.scripted import ScriptedEvaluator, candidate  # noqa: E402

__all__ = ["TASK", "ScriptedEvaluator", "candidate"]

TASK = (Path(__file__).resolve().parent / "fixtures" / "tasks" / "vector_add.py").read_text()
