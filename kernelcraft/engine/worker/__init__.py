"""What runs in a worker process, inside the box.

Owns the worker's entry point (`main.py`, `python -m kernelcraft.engine.worker.main FD`), its two
roles (`candidate.py`, untrusted; `reference.py`, trusted) and what they share (`common.py`),
importing a task or a candidate by path (`common.import_source`; the parent's checks of the source are
`source/intake.py`) and sizing a task without allocating it (`sizing.py`, with
`source/shrink.py`). May import `checks`, `measure`, `watch`, `box`, `wire` and `source`. Called by `startup` (the zygote forks it) and `host` (spawns it).
"""
