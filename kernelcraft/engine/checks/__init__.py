"""The rules a verdict rests on that run a candidate, in the parent or its workers.

Owns output comparison with tolerances (`compare.py`, its margins `margins.py`, the structure of
outputs `structure.py`), perturbed parameters and the small-magnitude trial (`perturb.py`,
`scaled.py`), every autotune config as a trial (`autotune.py`) and the ahead-of-time compile for
GPUs that are not here (`aot.py`). What is read from a source before anything runs (the intake,
the static rules) is `source/`'s. May import `watch`, `wire` and `source`. Called by `worker`
and `host`.
"""
