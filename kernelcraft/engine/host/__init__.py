"""The evaluator's own process: jobs, their workers, memory and the GPU.

Owns the `Evaluator` interface (`evaluator.py`) and its local implementation (`local.py`), one
job's stages (`job.py`, `jobtiming.py`) on its workers (`jobworkers.py`, `replies.py`), the pools of
pre-started workers (`pool.py`) and of reference workers (`references.py`), the memory ledger and
GPU lock (`memory.py`, `gpulock.py`), the verdicts a job returns (`verdicts.py`) and the CLI's head
start (`prestart.py`). Never runs candidate code.

May import every engine room but `cluster` and `worker` (it starts workers by module name, through
`startup`, and never imports their code). Called by `cluster`, and from outside the engine through
its door (`kernelcraft.engine`).
"""
