"""The evaluator's own process: jobs, their stages and their verdicts.

Owns the `Evaluator` interface (`evaluator.py`) and its local implementation (`local.py`), one
job's stages (`job/run.py`, `job/compile.py`, `job/timing.py`) on its workers (`job/workers.py`,
`replies.py`, its admission at the task's sizes in `job/admission.py`), all sharing the job's one
state (`job/state.py`), the pool of reference workers (`references.py`), the compile facts kept
per kernel (`compilefacts.py`) and the verdicts a job returns (`verdicts.py`). The machine's
processes and devices (worker pools, memory, the GPU lock, the head start) are `machine/`'s.
Never runs candidate code.

May import every engine room but `cluster` and `worker` (it starts workers by module name, through
`machine` and `startup`, and never imports their code). Called by `cluster`, and from outside the
engine through its door (`kernelcraft.engine`).
"""
