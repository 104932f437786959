"""What the evaluator's process holds of this machine, whatever the job: its workers and devices.

Owns the pools of pre-started workers (`pool.py`: spawned or forked from the zygote, their
environment, their sockets), the memory ledger (`memory.py`), the GPU lock that shares
verification and gives timing the GPU alone (`gpulock.py`) and the command line's head start and
box check (`prestart.py`). Never runs candidate code.

May import `startup` and the rooms below it, but not `worker` (a worker is started by module
name). Called by `host` and, from outside the engine (`prestart`, `box_preflight`), through its
door (`kernelcraft.engine`).
"""
