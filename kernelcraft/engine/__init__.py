"""The evaluation engine: compile, verify and profile a candidate against its task, in boxed workers.

Rooms, by the process their code runs in and what it is for (top to bottom; a room imports only
rooms below it, as `pyproject.toml`'s import-linter contract says and CI checks):

- `cluster/`: the evaluator on a Ray cluster, one actor per GPU, and which actor takes a job.
- `host/`: the evaluator's own process: the `Evaluator` interface, jobs and their stages,
  worker pools, the reference pool, memory and GPU scheduling, verdict building.
- `startup/`: making workers fast to start: the zygote that forks them, what is built once per machine.
- `worker/`: what runs in a worker process: its entry point, the candidate's and the reference's
  roles, loading and sizing a task.
- `checks/` and `measure/`: the rules a verdict rests on (static rules, output comparison,
  perturbed and scaled trials, the ahead-of-time GPU compile) and the timing a profile rests on
  (timers, input rotation, statistics, roofline floors, per-kernel breakdowns).
- `watch/`: what watches the candidate inside its own process: launch interception, refused
  launch hooks, the op recorder and integrity guard, the knockout, the replay, TF32 emulation.
- `box/`: what confines a worker: identity, namespaces, mounts, Landlock, seccomp, process limits,
  and the sweep of what a worker leaves behind.
- `wire/`: the typed protocol between the evaluator and its workers, and the channel it travels on.

Everything here may import `kernelcraft.base` and nothing else of kernelcraft. `search`, `level`,
`server` and `cli` call it through `host.evaluator.Evaluator` (built by `host.local` or
`cluster.ray_evaluator`).
"""
