"""`CandidateWorker`: the untrusted role of a worker process (see `worker/main.py`).

It loads the task (for `get_init_inputs`) and then the candidate, behind the harness's guards
(its box (box/__init__.py), a memory limit, a snapshot of the functions the harness relies on),
builds `ModelNew` after the reference's seed, and for each trial runs forward on fresh clones of
the inputs, with memory poisoned underneath, aten ops recorded and Triton launches counted, and
sends the outputs back. It never decides a verdict on the numbers: it reports its own failures
(`Verdict`), and the reference compares. It also compiles (the compile stage), JIT-warms and
times the candidate.
"""

from __future__ import annotations

import contextlib
import os
import sys
import traceback
from pathlib import Path
from typing import Any

from kernelcraft.base.errortext import CANDIDATE_MODULE
from kernelcraft.base.failures import FailureClass
from kernelcraft.engine.wire.protocol import (
    IMPORTING_CANDIDATE,
    Compile,
    CompiledFiles,
    KnockedOut,
    Knockout,
    Load,
    Loaded,
    Ok,
    Outputs,
    Perturb,
    Run,
    SendCompiled,
    TimeCandidate,
    UseInputs,
    Verdict,
    Warmup,
    parse_request,
)
from kernelcraft.engine.worker import room
from kernelcraft.engine.worker.common import trim_keeping_candidate
from kernelcraft.engine.worker.freeze import Unfrozen, freeze
from kernelcraft.engine.worker.stages import CandidateStages


class CandidateWorker(CandidateStages):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.job: Load | None = None
        self.harness_stream: Any = None
        """CUDA only: the stream current before the candidate was imported; restored after every
        call of the candidate's code (`restore_stream`)."""
        self.integrity: Any = None
        self.harness_changed: Any = None
        self.task: Any = None
        self.full_task: Any = None
        """The task as given, when `task` is its shrunk copy (the compile stage on a CPU machine:
        `discover` builds `ModelNew` from it on the meta device)."""
        self.model_class: Any = None
        self.found_launches: dict[str, int] = {}
        """Launches discovery found so far, by kernel name (said as found: `_found`)."""
        self.threads_before = 0
        self.model: Any = None
        self.inputs: Any = None
        self.poison_sizes: list[int] = []
        self.torch_ops: list[str] = []
        """PyTorch compute forward ran outside its kernels (recorded where the rule allows it)."""
        self.replayed: str | None = None
        """Why the last replayed run did not replay to its outputs (replay.py), or None."""
        self.interpreted: dict[str, list[float]] = {}
        """This trial's interpreted launches per kernel: [launches, programs, seconds]."""
        self.autotune_ran: list[dict[str, Any]] = []
        """The last call's `@triton.autotune` configs in the interpreter (`Outputs.autotune`)."""
        self.replay_limit: str | None = None
        """The harness-limit verdict's words when the replay ran out of memory (`room.py`)."""
        self.program: tuple[dict[str, Any] | None, list[Any], str | None] | None = None
        """Forward's record for the fresh-input replay (`replay/program.py`), when a run asked for
        it: (the Program's dump, the kept tensors it names, why it could not be written). The kept
        tensors stay alive until the process ends: the reference reads them at the end of verify."""
        self.sent: Any = None
        """The last outputs sent: kept alive until the next run (the reference reads them through
        CUDA IPC handles on a GPU)."""

    def run(self, job: Load, workdir: Path) -> None:
        """Load the candidate, say `loaded`, then answer requests until one it does not know (or
        until the candidate fails: its verdict is its last message)."""
        if not self.load(job, workdir):
            return
        while True:
            frame = self.recv()
            req = parse_request(frame.header)
            if isinstance(req, Run):
                if not self.run_forward(req, frame.blobs):
                    return
            elif isinstance(req, Compile):
                if "inputs" in req.model_fields_set:
                    self.inputs = self.unpack_cloned(req.inputs, frame.blobs)
                self.send(self.compile_stage(req))
            elif isinstance(req, Warmup):
                self.inputs = self.unpack_cloned(req.inputs, frame.blobs)
                self.send(self.warmup())
            elif isinstance(req, TimeCandidate):  # None: the witness call's verdict was sent
                if (timed := self.time_candidate(req)) is None or self.check_harness("timing forward"):
                    return
                self.send(*timed)
            elif isinstance(req, Knockout):
                self.inputs = self.unpack_cloned(req.inputs, frame.blobs)
                self.send(*self.knockout())
            elif isinstance(req, Perturb):
                try:
                    self.perturb_model(self.model, req.seed)
                except BaseException as e:
                    self.fail_exception(e, "load")
                    return
                self.send(Ok())
            elif isinstance(req, UseInputs):  # profile times on the task's main input set
                self.inputs = self.unpack_cloned(req.inputs, frame.blobs)
                self.send(Ok())
            elif isinstance(req, SendCompiled):  # what it compiled, for its next process (kernelcache.py)
                from kernelcraft.engine.worker import compiled

                names, blobs = compiled.collect(req.known)
                self.send(CompiledFiles(names=names), blobs)
            else:
                return

    def load(self, job: Load, workdir: Path) -> bool:
        """Load the task, set the guards up, import the candidate and build `ModelNew`; say
        `loaded`. False when something failed (reported)."""
        import threading

        from kernelcraft.engine.checks import perturb
        from kernelcraft.engine.watch import fakecuda, guard
        from kernelcraft.engine.worker.common import import_source

        self.job = job
        if job.interpret:
            os.environ["TRITON_INTERPRET"] = "1"
        else:
            os.environ.pop("TRITON_INTERPRET", None)
        if self.device.startswith("cuda"):
            from kernelcraft.engine.measure import timing  # (captures the timers before the candidate)

            self.harness_stream = timing._current_stream()
        if job.interpret:
            from kernelcraft.engine.watch.tf32 import emulate_tf32

            emulate_tf32()  # fp32 tl.dot is TF32 on the GPU unless the kernel asks for IEEE
        self.integrity = guard.Integrity()  # (after the emulation: it watches that too)
        # Bound before the candidate is imported: replacing Integrity.changed later changes
        # nothing that runs here (and is itself reported).
        self.harness_changed = self.integrity.changed
        self._limit_memory(job)
        sandbox_note = None
        if job.sandbox:
            from kernelcraft.engine import box

            # From here on: limited processes, files (reads and writes) and network (see box/__init__.py).
            # The task is a client's code as much as the candidate is: it loads inside the box.
            sandbox_note = box.confine(workdir)
        else:
            sandbox_note = "the candidate ran without its box (KERNELCRAFT_SANDBOX=off)"
        try:
            task = self.task = self.load_task(job, workdir)
            if job.full_task_source is not None:
                self.full_task = import_source(job.full_task_source, workdir, "kernelcraft_task_full")
            init = self.init_inputs(task, job.seed0)
        except Exception as e:
            self.task_error(e)
            return False
        self.threads_before = threading.active_count()
        self.progress(IMPORTING_CANDIDATE)
        try:  # host code with no CPU way (`assert x.is_cuda`) runs the GPU's way here (fakecuda.py)
            with (way := fakecuda.CandidateWay(job.candidate_source, workdir, self.device == "cpu")):
                self.model_class = import_source(job.candidate_source, workdir, CANDIDATE_MODULE).ModelNew
                self.model = way.wrap(self.build(self.model_class, init, job.seed0, job.model_mode))
            parameters = perturb.named_signature(self.model)
        except BaseException as e:
            self.fail_exception(e, "load")
            return False
        if self.check_harness("importing the candidate"):
            return False
        if self.restore_stream():
            self.fail(
                FailureClass.FORBIDDEN_CONSTRUCT,
                "importing the candidate changed the current CUDA stream; launch on the current stream",
                op="torch.cuda.set_stream",
            )
            return False
        self.send(
            Loaded(
                sandbox_unavailable=sandbox_note, parameters=parameters, initial_values=self.initial_values
            )
        )
        return True

    def run_forward(self, req: Run, blobs: list[bytes]) -> bool:
        """One trial: forward on fresh clones of the inputs (a second time over different garbage
        when `determinism`), then the outputs sent. False when the candidate failed (reported)."""
        torch = self.torch
        self.sent = None
        self.inputs = self.unpack_cloned(req.inputs, blobs)
        if not self.poison_sizes:
            self.poison_sizes = [
                x.numel() * x.element_size() for x in self.inputs if isinstance(x, torch.Tensor)
            ]
        outputs = []
        self.replayed = self.replay_limit = None
        self.interpreted = {}
        after: Any = None
        names: list[str] = []
        tf32 = sys.modules.get("kernelcraft.engine.watch.tf32")
        dots_before = tf32.rounded() if tf32 is not None else 0
        for run, value in enumerate([float("nan"), 1.0e4][: 2 if req.determinism else 1]):
            call_inputs = self._map(self.inputs, lambda t: t.clone())
            # The first run is replayed from its record (replay.py); the determinism re-run must
            # then match it.
            result = self.call(
                call_inputs,
                value,
                replay=run == 0,
                autotune_pick=req.autotune_pick,
                program=req.program and run == 0,
            )
            if result is None:
                return False
            out, names = result
            if self.check_harness("forward"):
                return False
            if run == 0:
                after = call_inputs
            outputs.append(out)
            leaves = [x for x in self.tensors.leaves(out) if isinstance(x, torch.Tensor)]
            self.poison_sizes = [x.numel() * x.element_size() for x in leaves] or self.poison_sizes
        out_blobs: list[bytes] = []
        recs = [self.tensors.pack(o, out_blobs, cuda_ipc=self.cuda_ipc) for o in outputs]
        after_rec = self.tensors.pack(after, out_blobs, cuda_ipc=self.cuda_ipc)
        self.sent = (outputs, after)
        said: dict[str, Any] = {}
        if req.program and self.program is not None:
            dump, kept, error = self.program
            if dump is not None:
                said["program"] = dump
                said["program_kept"] = self.tensors.pack(kept, out_blobs, cuda_ipc=self.cuda_ipc)
            said["program_error"] = error
        dots = (tf32.rounded() - dots_before) if tf32 is not None else 0
        self.send(
            Outputs(
                outputs=recs,
                inputs_after=after_rec,
                kernels=names,
                tf32_dots=dots,
                replay=self.replayed,
                replay_limit=self.replay_limit,
                autotune=self.autotune_ran,
                interpreted=self.interpreted,
                torch_ops=self.torch_ops,
                **said,
            ),
            out_blobs,
        )
        return True

    def knockout(self) -> tuple[KnockedOut | Verdict, list[bytes]]:
        """forward with every Triton launch skipped and fresh allocations poisoned: what it
        returns goes to the reference, which must find it wrong (`knockout.py`)."""
        from kernelcraft.engine.watch import guard
        from kernelcraft.engine.watch.knockout import run_knocked_out

        call_inputs = self._map(self.inputs, lambda t: t.clone())
        out, skipped, error = run_knocked_out(self.model, call_inputs)
        left = guard.modes_left(None)
        if left is not None:  # (its code would run as its output is read, deciding the knockout)
            message = f"forward left {left} active, which would run its code after the knockout"
            return Verdict(
                failure_class=FailureClass.FORBIDDEN_CONSTRUCT.value, evidence={"message": message}
            ), []
        self.restore_stream()
        self.sync()
        try:
            out, call_inputs = freeze(out), freeze(call_inputs, "an input after forward")
        except Unfrozen as e:  # the trials refuse the same (this answer only weakens the knockout)
            out, error = None, str(e)
        if out is None:
            return KnockedOut(skipped=skipped, error=error), []
        blobs: list[bytes] = []
        rec = self.tensors.pack(out, blobs, cuda_ipc=self.cuda_ipc)
        after = self.tensors.pack(call_inputs, blobs, cuda_ipc=self.cuda_ipc)
        self.sent = (out, call_inputs)
        return KnockedOut(outputs=rec, inputs_after=after, skipped=skipped), blobs

    def _limit_memory(self, job: Load) -> None:
        limit = job.memory_limit_bytes
        if not limit:
            return
        if self.device.startswith("cuda"):
            total = self.torch.cuda.get_device_properties(0).total_memory
            self.torch.cuda.set_per_process_memory_fraction(min(1.0, limit / total))
            return
        import resource

        with open("/proc/self/statm") as f:
            vm_bytes = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        cap = vm_bytes + int(limit)
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    def poison(self, sizes: list[int], value: float) -> None:
        """Fill then free buffers of the sizes forward will allocate, so that memory it reads
        without writing holds garbage (NaN first, a different value in the determinism re-run)."""
        torch = self.torch
        bufs = [
            torch.empty(max(1, n // 4), dtype=torch.float32, device=self.device).fill_(value) for n in sizes
        ]
        self.sync()
        del bufs

    def call(
        self,
        inputs: list[Any],
        value: float,
        replay: bool = False,
        autotune_pick: int = 0,
        program: bool = False,
    ) -> tuple[Any, list[str]] | None:
        """forward(*inputs) over memory poisoned with `value`, ops recorded and launches counted
        (and, with `replay`, forward replayed from that record: `replay.py`): the outputs and the
        kernels launched, or None when it failed (reported)."""
        from kernelcraft.engine.replay import replay as replays
        from kernelcraft.engine.replay import traced
        from kernelcraft.engine.watch import guard
        from kernelcraft.engine.watch.launches import intercept_launches

        assert self.job is not None
        torch = self.torch
        tape = None
        if replay:
            tape = replays.Tape()
            leaves = [x for x in self.tensors.leaves(inputs) if isinstance(x, torch.Tensor)]
            pristine = [x for x in self.tensors.leaves(self.inputs) if isinstance(x, torch.Tensor)]
            tape.keep(leaves, pristine, self.model, replays.candidate_scopes())
        self.poison(self.poison_sizes, value)
        recorder = guard.OpRecorder(frozenset(self.job.allowed_ops), tape)
        built = dict(vars(recorder))
        # host reads hand forward traced numbers (the fresh replay re-derives what they feed)
        reads = traced.ReadTracer(tape) if tape is not None else contextlib.nullcontext()
        timing = (
            sys.modules.get("kernelcraft.engine.measure.timing") if self.device.startswith("cuda") else None
        )
        stream = self.harness_stream
        rec = None
        peak = room.ForwardPeak(torch, self.device)
        unfrozen: str | None = None
        try:
            with (
                peak,
                torch.no_grad(),
                intercept_launches(
                    execute=True,
                    autotune="first" if self.job.interpret else "benchmark",
                    tape=tape,
                    autotune_pick=autotune_pick,
                ) as rec,
                recorder,
                reads,
            ):
                out = self.model(*inputs)
                # Frozen before the recorders close: nothing of the candidate's runs after them.
                try:
                    out = freeze(out)
                    freeze(inputs, "an input after forward")  # (a tensor's __class__ swapped)
                except Unfrozen as e:
                    unfrozen = str(e)
                left = guard.modes_left(recorder, reads if tape is not None else None)
                if left is not None:
                    unfrozen = f"forward left {left} active, which would run its code after the recording"
            self.sync()
        except BaseException as e:
            if rec is None or not rec.refused:
                self.fail_exception(e, "runtime")
                return None
        if rec is not None and rec.refused:  # a hook refused (even where forward swallowed the error)
            refused = rec.refused[0]
            self.fail(FailureClass.FORBIDDEN_CONSTRUCT, str(refused), op=refused.op)
            return None
        tampered = guard.recorder_intact(recorder, built)
        if tampered is not None:
            self.fail(FailureClass.FORBIDDEN_CONSTRUCT, f"forward changed {tampered}", op="op recorder")
            return None
        if unfrozen is not None:
            self.fail(FailureClass.FORBIDDEN_CONSTRUCT, unfrozen, op="output type")
            return None
        if timing is not None and stream is not None and timing.stream_changed(stream):
            self.fail(
                FailureClass.FORBIDDEN_CONSTRUCT, timing.STREAM_CHANGED_MESSAGE, op="torch.cuda.set_stream"
            )
            return None
        names = list(dict.fromkeys([r.launch.name for r in rec.records]))
        self.autotune_ran = [
            {"kernel": k, "index": a.index, "configs": list(a.configs)} for k, a in rec.autotune_ran.items()
        ]
        for k, (n, programs, seconds) in rec.interpreted.items():
            total = self.interpreted.setdefault(k, [0, 0, 0.0])
            total[0], total[1], total[2] = total[0] + n, total[1] + programs, total[2] + seconds
        if recorder.fallbacks and self.job.correctness == "adaexplore":
            self.torch_ops = list(dict.fromkeys([*self.torch_ops, *recorder.fallbacks]))
        elif recorder.fallbacks:
            op = recorder.fallbacks[0]
            qualified = op if "::" in op else f"aten.{op}"  # a custom op keeps its namespace
            self.fail(
                FailureClass.PYTORCH_FALLBACK,
                f"forward ran PyTorch compute ({qualified}) outside Triton kernels; "
                f"write it as a Triton kernel (all ops seen: {', '.join(recorder.fallbacks)})",
                op=qualified,
            )
            return None
        if rec.count == 0:
            self.fail(FailureClass.NO_TRITON_LAUNCH, "forward launched no Triton kernel")
            return None
        if tape is not None:
            outputs = [x for x in self.tensors.leaves(out) if isinstance(x, torch.Tensor)]
            limit = self.job.memory_limit_bytes
            try:
                with room.replay_room(torch, self.device, limit, peak.peak):
                    self.replayed = tape.replay(outputs, self.sync)
            except replays.ReplayOutOfMemory as e:
                self.replay_limit = room.limit_message(str(e), limit, peak.peak)
            if program:
                self.program = _export(tape, outputs)
        return out, names

    def check_harness(self, when: str) -> bool:
        """Whether the candidate replaced a function the harness relies on or left a thread
        running (reported)."""
        import threading

        changed = self.harness_changed()
        timing_mod = sys.modules.get("kernelcraft.engine.measure.timing")
        patched_timer = timing_mod.timing_functions_intact() if timing_mod is not None else None
        if patched_timer:
            changed.append(str(patched_timer))
        if changed:
            self.fail(
                FailureClass.FORBIDDEN_CONSTRUCT,
                f"{when} replaced {', '.join(changed[:5])}; the candidate must not patch torch, Triton or the harness",
                op=changed[0],
            )
            return True
        if threading.active_count() > self.threads_before:
            self.fail(
                FailureClass.FORBIDDEN_CONSTRUCT,
                f"{when} started {threading.active_count() - self.threads_before} thread(s); do all work inside forward",
                op="threading",
            )
            return True
        return False

    def fail(self, cls: FailureClass, message: str, **evidence: Any) -> None:
        self.send(Verdict(failure_class=cls.value, evidence=dict(message=message, **evidence)))

    def fail_exception(self, e: BaseException, stage: str) -> None:
        from kernelcraft.base.failures import classify

        text = trim_keeping_candidate("".join(traceback.format_exception(type(e), e, e.__traceback__)), e)
        try:
            from triton.compiler.errors import CompilationError
        except ImportError:  # pragma: no cover - triton always has it
            CompilationError = ()  # type: ignore[assignment,misc]
        if isinstance(e, MemoryError):
            cls = FailureClass.RUNTIME_OUT_OF_MEMORY
        elif isinstance(e, CompilationError):
            cls = classify(text, "compile")
        elif stage == "load":
            cls = FailureClass.LOAD_ERROR
        else:
            tb = traceback.extract_tb(e.__traceback__)
            in_triton = bool(tb) and f"{os.sep}triton{os.sep}" in tb[-1].filename
            cls = classify(text, None if in_triton else "runtime")
        where = "importing or constructing ModelNew" if stage == "load" else "forward"
        self.send(
            Verdict(
                failure_class=cls.value,
                evidence={
                    "message": f"{where} raised {type(e).__name__}: {str(e)[:300]}",
                    "error_text": text,
                },
            )
        )


def _export(tape: Any, outputs: list[Any]) -> tuple[dict[str, Any] | None, list[Any], str | None]:
    """Forward's record as a `program.Program` dump and the kept tensors it names; or why not."""
    from kernelcraft.engine.replay.export import Exporter

    try:
        program, kept = Exporter(tape).export(outputs)
    except Exception as e:  # noqa: BLE001 - reported: the job fails a run it cannot re-run
        return None, [], f"forward's record could not be written down ({type(e).__name__}: {str(e)[:300]})"
    return program.model_dump(), kept, None
