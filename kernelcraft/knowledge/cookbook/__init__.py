"""The cookbook: our own Triton kernels for the op families KernelBench is made of, each a
KernelBench-format candidate (`entries/<id>/kernel.py`, class ModelNew) with the task it was
verified on (`entries/<id>/task.py`), and metadata in `index.json` (family, the KernelBench
problems it solves, the conditions it needs, the precision it uses, H200 figures once measured).

Read by the `search_examples` MCP tool, `kernelcraft cookbook` and, through the tool, the driver
agent's seed step. Advice for a writer only: nothing that decides a verdict reads it (the engine
never imports this package). Written by hand and by `bench/bench_cookbook.py --write-figures`
(figures only). Imports only `schema`, `base` and `knowledge.text`.
"""

from kernelcraft.knowledge.cookbook.book import Cookbook, load_cookbook, task_terms

__all__ = ["Cookbook", "load_cookbook", "task_terms"]
