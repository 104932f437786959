"""Forward's record run again, without the candidate's Python.

Owns the same-input replay in the candidate's worker (`replay.py`, with what it knows of a
storage in `storage.py`), the record as plain data (`program.py`, exported by `export.py`), the
check that a recorded kernel's body is Triton language (`kernelsource.py`) and the fresh-input
replay in the reference worker (`fresh.py`). May import `watch` and `wire`. Called by `worker`,
`checks` and `host`.
"""
