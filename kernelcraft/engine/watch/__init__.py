"""What watches a candidate inside its own process, while its forward runs.

Owns launch interception and the identity of Triton's own code (`launches.py`), the refusal of
launch hooks (`hooks.py`), the op recorder and integrity guard (`guard.py`), the knockout
(`knockout.py`), the replay (`replay.py`, with what it knows of a storage in `storage.py`) and the
dot emulation of the CPU interpreter
(`tf32.py`). These run beside untrusted code: each catches what the others miss, and no verdict
on the numbers rests on them alone (outputs are compared in the trusted reference worker). May
import `wire`. Called by `worker` and `checks`.
"""
