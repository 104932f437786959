"""What runs in a worker process, inside the box.

Owns the worker's entry point (`main.py`, `python -m kernelcraft.engine.worker.main FD`), its two
roles (`candidate.py`, untrusted; `reference.py`, trusted) and what they share (`common.py`),
loading tasks and candidates (`loading.py`, whose file checks the parent runs too) and sizing a
task without allocating it (`sizing.py`, `shrink.py`). May import `checks`, `measure`, `watch`,
`box` and `wire`. Called by `startup` (the zygote forks it) and `host` (spawns it).
"""
