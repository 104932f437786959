"""The rules a verdict rests on, outside the candidate's process or before it runs.

Owns the intake (`intake.py`: a task's and a candidate's source read, parsed and checked once,
before any process starts), the static (AST) rules run in the parent (`static.py`, with what
they forbid in `forbidden.py` and the candidate's own imported modules found by
`local_imports.py`), the size-dependent control flow a shrunk run did not reach (`reach.py`, also
AST in the parent), the shrink of a large task's sizes for the interpreter (`shrink.py`, pure
`ast`), output comparison with tolerances (`compare.py`), perturbed parameters and the
small-magnitude trial (`perturb.py`, `scaled.py`) and the ahead-of-time compile for GPUs that
are not here (`aot.py`). May import `watch` and `wire`. Called by `worker` and `host`, and from
outside the engine (the intake) through its door (`kernelcraft.engine`).
"""
