"""One submitted job, in the evaluator's process: `Job` (`run.py`, the stages in order) and its
parts, which share the job's one `JobState` (`state.py`): `JobWorkers` (`workers.py`, the
processes), `JobCompile` (`compile.py`, the compile stage and the GPU check), `JobTiming`
(`timing.py`, the profile and baseline stages), the admission at the task's sizes
(`admission.py`) and the fresh-input replay of the trials' records (`replay.py`). A part reaches
another only through its operations (`tests/engine/host/test_jobstate.py`).
"""
