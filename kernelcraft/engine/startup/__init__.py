"""Workers that start fast: the zygote and what is built once per machine.

Owns the zygote that imports torch, Triton and the harness once and forks workers
(`zygote.py`), the checks that it may still fork (`forksafe.py`), and what a trusted process builds
once per machine for every GPU worker (`prebuilt.py`). May import `worker`, `box` and the rooms
below them. Called by `host` (the pools).
"""
