"""What watches a candidate inside its own process, while its forward runs.

Owns launch interception and the identity of Triton's own code (`launches.py`, `trusted.py`), the
refusal of launch hooks (`hooks.py`), the op recorder and integrity guard (`guard.py`, the
harness snapshot member by member in `members.py`), what a launch records (`records.py`), the
knockout (`knockout.py`) and the dot emulation of the CPU interpreter (`tf32.py`). These run
beside untrusted code: each catches what the others miss, and no verdict on the numbers rests
on them alone (outputs are compared in the trusted reference worker). Running forward's record
again is `replay/`'s. May import `wire`. Called by `replay`, `worker` and `checks`.
"""
