"""The rules a verdict rests on, outside the candidate's process or before it runs.

Owns the static (AST) rules run in the parent (`static.py`, with what they forbid in `forbidden.py`
and the candidate's own imported modules found by `local_imports.py`), the size-dependent control flow a
shrunk run did not reach (`reach.py`, also AST in the parent), output comparison with tolerances
(`compare.py`), perturbed parameters and the small-magnitude trial (`perturb.py`, `scaled.py`) and
the ahead-of-time compile for GPUs that are not here (`aot.py`). May import `watch` and `wire`.
Called by `worker` and `host`.
"""
