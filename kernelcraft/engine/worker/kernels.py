"""`KernelsWorker`: a trusted role that compiles the kernels a candidate's trials launched.

Without a GPU, a verdict the interpreter passed also needs the GPU compiler's word (`JobCompile.gpu_check`).
The compile stage finds launches by running the candidate's forward again in its own process, so a
forward that launches another kernel there (it can tell: Triton's interpreter is off, the inputs
are on the meta device) has a decoy compiled instead of what the trials ran. This role loads
neither the task nor the candidate: it gets each distinct trial's record (`replay/program.py`),
rebuilds their kernels from their recorded source (`replay/kernelsource.py`, checked first), lays
their arguments out as the trial had them (`fresh.recorded_launches`) and compiles exactly those
specialisations for the asked targets (`checks/aot.py`). Its pool runs Triton without the
interpreter. Runs in the worker process only.
"""

from __future__ import annotations

import time
import traceback
from pathlib import Path

from kernelcraft.engine.wire.protocol import Compiled, CompileRecorded, Load, Ok, parse_request
from kernelcraft.engine.worker.common import Worker, trim


class KernelsWorker(Worker):
    def run(self, job: Load, workdir: Path) -> None:
        """Close the box, say `ok`, then compile each recorded program asked for."""
        if job.sandbox:
            from kernelcraft.engine import box

            box.confine(workdir)  # the kernels' source is the candidate's
        self.send(Ok())
        while True:
            req = parse_request(self.recv().header)
            if not isinstance(req, CompileRecorded):
                return
            self.send(self.compile(req))

    def compile(self, req: CompileRecorded) -> Compiled:
        from kernelcraft.engine.checks.aot import compile_for_targets
        from kernelcraft.engine.replay.fresh import recorded_launches
        from kernelcraft.engine.replay.program import Program

        start = time.perf_counter()
        try:
            records = [
                r for p in [req.program, *req.more] for r in recorded_launches(Program.model_validate(p))
            ]
            targets = compile_for_targets(records, req.targets)
        except Exception as e:  # noqa: BLE001 - the candidate's record: its verdict, with the text
            return Compiled(error=trim(traceback.format_exc()), summary=f"{type(e).__name__}: {e}"[:500])
        return Compiled(
            launches=[r.launch.model_dump() for r in records],
            targets=[t.model_dump() for t in targets],
            seconds=time.perf_counter() - start,
            shapes="the trials' launches, as recorded",
        )
