"""What the parent reads from a task's or a candidate's source before anything runs: `ast` only,
no torch, no process.

Owns the intake (`intake.py`: a source read, parsed and checked once), the static anti-cheat
rules (`static.py` and `escapes.py`, the ways to reach a builtin or a module unnamed, on
`rulebase.py`, with what they forbid in `forbidden.py` and the candidate's own imported modules
found by `local_imports.py`), the size-dependent control flow a shrunk run did not reach
(`reach.py`) and the shrink of a large task's sizes for the interpreter (`shrink.py`). May import
nothing of the engine. Called by `host`, `cluster`, `worker` and `checks`, and from outside the
engine (the intake) through its door (`kernelcraft.engine`).
"""
