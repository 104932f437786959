"""Whole levels: a folder of KernelBench tasks against a folder of candidates, or timed alone.

`tasks.py` finds the tasks and matches candidates, `runner.py` evaluates them on the engine
(resumable, one outcome a line in `results.jsonl`), `score.py` computes fast_p and the
geometric-mean speedup, and `kernelbench.py` writes the files KernelBench's analysis reads.
Beside `search` in the layering: it imports the engine and base only.
"""
