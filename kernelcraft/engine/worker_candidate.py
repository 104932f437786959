"""The candidate role of a worker process (moved from `worker.py`)."""

from __future__ import annotations

import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from kernelcraft.engine.worker_common import Worker, _trim


class CandidateWorker(Worker):
    def candidate(self, job: dict[str, Any], workdir: Path) -> None:
        import threading

        from kernelcraft.base.failures import FailureClass
        from kernelcraft.engine import guard
        from kernelcraft.engine.loading import import_source

        torch = self.torch
        if job.get("interpret"):
            os.environ["TRITON_INTERPRET"] = "1"
        else:
            os.environ.pop("TRITON_INTERPRET", None)
        if self.device.startswith("cuda"):
            from kernelcraft.engine import timing  # (captures the timers before the candidate)

            self.harness_stream = timing._current_stream()
        integrity = guard.Integrity()
        try:
            task = self.load_task(job, workdir)
            init = self.init_inputs(task, job["seed0"])
        except Exception as e:
            self.task_error(e)
            return
        self._limit_memory(job)
        sandbox_note = None
        if job.get("sandbox", True):
            from kernelcraft.engine.sandbox import restrict_writes

            # From here on this process writes only in its own directory (Triton cache, HOME,
            # TMPDIR) and to device files: not the database, not the user's files.
            sandbox_note = restrict_writes([str(workdir), "/dev/shm"])
        threads_before = threading.active_count()
        self.progress("importing the candidate")
        try:
            module = import_source(job["candidate_source"], workdir, "kernelcraft_candidate")
            model = self.build(module.ModelNew, init, job["seed0"])
        except BaseException as e:
            self.fail_exception(e, "load")
            return
        if self.check_harness(integrity, threads_before, "importing the candidate"):
            return
        if self.restore_stream():
            self.fail(
                FailureClass.FORBIDDEN_CONSTRUCT,
                "importing the candidate changed the current CUDA stream; launch on the current stream",
                op="torch.cuda.set_stream",
            )
            return
        self.send({"type": "loaded", "sandbox_unavailable": sandbox_note})
        allowed = frozenset(job.get("allowed_ops", []))
        poison_sizes: list[int] = []
        inputs: Any = None
        while True:
            frame = self.recv()
            op = frame.header.get("op")
            if op == "run":
                inputs = self.unpack_cloned(frame.header["inputs"], frame.blobs)
                if not poison_sizes:
                    poison_sizes = [
                        x.numel() * x.element_size() for x in inputs if isinstance(x, torch.Tensor)
                    ]
                outputs = []
                after: Any = None
                for run, value in enumerate(
                    [float("nan"), 1.0e4][: 2 if frame.header.get("determinism") else 1]
                ):
                    call_inputs = self._map(inputs, lambda t: t.clone())
                    result = self.call(model, call_inputs, poison_sizes, value, allowed, job)
                    if result is None:
                        return
                    out, names = result
                    if self.check_harness(integrity, threads_before, "forward"):
                        return
                    if run == 0:
                        after = call_inputs
                    outputs.append(out)
                    leaves = [x for x in self.tensors.leaves(out) if isinstance(x, torch.Tensor)]
                    poison_sizes = [x.numel() * x.element_size() for x in leaves] or poison_sizes
                blobs: list[bytes] = []
                recs = [self.tensors.pack(o, blobs, cuda_ipc=self.cuda_ipc) for o in outputs]
                if not all(self.tensors.exact_types(r) for r in recs):
                    self.fail(
                        FailureClass.FORBIDDEN_CONSTRUCT,
                        "forward returned a Tensor subclass; return plain torch.Tensor outputs",
                        op="Tensor subclass",
                    )
                    return
                after_rec = self.tensors.pack(after, blobs, cuda_ipc=self.cuda_ipc)
                self.send(
                    {"type": "outputs", "outputs": recs, "inputs_after": after_rec, "kernels": names}, blobs
                )
            elif op == "compile":
                if "inputs" in frame.header:
                    inputs = self.unpack_cloned(frame.header["inputs"], frame.blobs)
                self.send(self.compile_stage(model, inputs, frame.header))
            elif op == "warmup":
                inputs = self.unpack_cloned(frame.header["inputs"], frame.blobs)
                self.send(self.warmup(model, inputs))
            elif op == "time_candidate":
                self.send(self.time_candidate(model, inputs, frame.header))
            elif op == "use_inputs":  # profile times on the task's main input set
                inputs = self.unpack_cloned(frame.header["inputs"], frame.blobs)
                self.send({"type": "ok"})
            else:
                return

    def restore_stream(self) -> bool:
        """Set the harness's stream current again; True when the candidate had changed it."""
        timing = sys.modules.get("kernelcraft.engine.timing")
        if self.harness_stream is None or timing is None:
            return False
        return bool(timing.stream_changed(self.harness_stream))

    def _limit_memory(self, job: dict[str, Any]) -> None:
        limit = job.get("memory_limit_bytes")
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
        model: Any,
        inputs: list[Any],
        poison_sizes: list[int],
        value: float,
        allowed: frozenset[str],
        job: dict[str, Any],
    ) -> tuple[Any, list[str]] | None:
        from kernelcraft.base.failures import FailureClass
        from kernelcraft.engine import guard
        from kernelcraft.engine.launches import intercept_launches

        torch = self.torch
        self.poison(poison_sizes, value)
        recorder = guard.OpRecorder(allowed)
        timing = sys.modules.get("kernelcraft.engine.timing") if self.device.startswith("cuda") else None
        stream = self.harness_stream
        try:
            with (
                torch.no_grad(),
                intercept_launches(
                    execute=True, autotune="first" if job.get("interpret") else "benchmark"
                ) as rec,
                recorder,
            ):
                out = model(*inputs)
            self.sync()
        except BaseException as e:
            self.fail_exception(e, "runtime")
            return None
        if timing is not None and stream is not None and timing.stream_changed(stream):
            self.fail(
                FailureClass.FORBIDDEN_CONSTRUCT, timing.STREAM_CHANGED_MESSAGE, op="torch.cuda.set_stream"
            )
            return None
        names = list(dict.fromkeys([r.launch.name for r in rec.records]))
        if recorder.fallbacks:
            op = recorder.fallbacks[0]
            self.fail(
                FailureClass.PYTORCH_FALLBACK,
                f"forward ran PyTorch compute (aten.{op}) outside Triton kernels; "
                f"write it as a Triton kernel (all ops seen: {', '.join(recorder.fallbacks)})",
                op=f"aten.{op}",
            )
            return None
        if rec.count == 0:
            self.fail(FailureClass.NO_TRITON_LAUNCH, "forward launched no Triton kernel")
            return None
        return out, names

    def check_harness(self, integrity: Any, threads_before: int, when: str) -> bool:
        import threading

        from kernelcraft.base.failures import FailureClass

        changed = integrity.changed()
        timing_mod = sys.modules.get("kernelcraft.engine.timing")
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
        if threading.active_count() > threads_before:
            self.fail(
                FailureClass.FORBIDDEN_CONSTRUCT,
                f"{when} started {threading.active_count() - threads_before} thread(s); do all work inside forward",
                op="threading",
            )
            return True
        return False

    def fail(self, cls: Any, message: str, **evidence: Any) -> None:
        self.send(
            {"type": "verdict", "failure_class": cls.value, "evidence": dict(message=message, **evidence)}
        )

    def fail_exception(self, e: BaseException, stage: str) -> None:
        from kernelcraft.base.failures import FailureClass, classify

        text = _trim("".join(traceback.format_exception(type(e), e, e.__traceback__)))
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
            {
                "type": "verdict",
                "failure_class": cls.value,
                "evidence": {
                    "message": f"{where} raised {type(e).__name__}: {str(e)[:300]}",
                    "error_text": text,
                },
            }
        )

    # ---- compile and profile stages (candidate side) ----

    def compile_stage(self, model: Any, inputs: list[Any], header: dict[str, Any]) -> dict[str, Any]:
        from kernelcraft.engine.aot import compile_for_targets
        from kernelcraft.engine.launches import intercept_launches

        start = time.perf_counter()
        try:
            with self.torch.no_grad(), intercept_launches(execute=False) as rec:
                model(*self._map(inputs, lambda t: t.clone()))
            self.restore_stream()
            targets = compile_for_targets(rec.records, header["targets"])
            if self.device.startswith("cuda"):
                from kernelcraft.engine.aot import compile_host

                targets.append(compile_host(rec.records))  # the real JIT compile on this GPU
        except Exception as e:
            return {
                "type": "compiled",
                "error": _trim(traceback.format_exc()),
                "summary": f"{type(e).__name__}: {e}",
            }
        return {
            "type": "compiled",
            "launches": [la.model_dump() for la in rec.launches],
            "targets": [t.model_dump() for t in targets],
            "seconds": time.perf_counter() - start,
        }

    def time_candidate(self, model: Any, inputs: list[Any], header: dict[str, Any]) -> dict[str, Any]:
        try:
            from kernelcraft.engine import timing

            self.restore_stream()
            with self.torch.no_grad():
                r = timing.sample_round(
                    model,
                    budget_ms=header.get("budget_ms", 100.0),
                    method=header.get("method", "auto"),
                    input_sets=lambda: self._map(inputs, lambda t: t.clone()),
                )
            return {
                "type": "timed",
                "candidate": {"times_us": r.times_us, "method": r.method, "sets": r.sets},
            }
        except Exception as e:
            name = type(e).__name__
            if name in ("StreamChanged", "WorkEscaped") and type(e).__module__ == "kernelcraft.engine.timing":
                from kernelcraft.base.failures import FailureClass

                op = "torch.cuda.set_stream" if name == "StreamChanged" else "another CUDA stream"
                return {
                    "type": "verdict",
                    "failure_class": FailureClass.FORBIDDEN_CONSTRUCT.value,
                    "evidence": {"message": str(e), "op": op},
                }
            return {"type": "timed", "error": _trim(traceback.format_exc()), "summary": repr(e)}

    def warmup(self, model: Any, inputs: list[Any]) -> dict[str, Any]:
        """Compile the kernels forward will launch without running any (launch discovery, then
        `JITFunction.warmup`), so that JIT compilation happens before the GPU lock is taken."""
        from kernelcraft.engine.launches import intercept_launches

        compiled = 0
        try:
            with self.torch.no_grad(), intercept_launches(execute=False) as rec:
                model(*self._map(inputs, lambda t: t.clone()))
            self.restore_stream()
            for r in rec.records:
                grid = tuple(r.launch.grid) or (1,)
                r.jit_fn.warmup(*r.args, grid=grid, **r.kwargs)
                compiled += 1
        except Exception as e:  # the real run reports the error with its proper class
            return {"type": "warm", "compiled": compiled, "error": f"{type(e).__name__}: {e}"[:500]}
        return {"type": "warm", "compiled": compiled}
