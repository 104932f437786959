"""A single-use evaluation worker process: `python -m kernelcraft.engine.worker FD`.

The parent (`pool.py`) starts it with a scrubbed environment, in its own session, with one end of
a socket pair as file descriptor FD. It imports torch and Triton (and initialises CUDA when it has
a GPU), says `ready`, and waits for its one job, which gives it a role:

- **reference** (trusted): loads only the task; builds `Model` after `torch.manual_seed(seed0)`;
  for each trial draws inputs from the seed the parent sends, computes the reference outputs,
  shares a copy of the inputs, and later compares what the candidate returned against its own
  private copies (outputs, and inputs for mutation). Also counts FLOPs/bytes and times the
  reference for profile. It never imports candidate code, so the parent may keep it for the next
  job on the same task (`next`: state dropped, `Model` rebuilt from the seed).
- **candidate** (untrusted): loads the task (for `get_init_inputs`) and then the candidate,
  builds `ModelNew` after the same seed, and for each trial runs forward on fresh clones of the
  inputs, with memory poisoned underneath, aten ops recorded and Triton launches counted, and
  sends the outputs back. It never decides a verdict on the numbers.

Nothing is printed on stdout for the parent: every message goes over the socket (see
`channel.py`). A candidate process exits after its one job; the parent kills its process group regardless.

Written by the evaluation engine only.
"""

from __future__ import annotations

import os
import socket
import sys
import time
import traceback
from pathlib import Path
from typing import Any

MAX_ERROR_CHARS = 4000


def _trim(text: str) -> str:
    return text if len(text) <= MAX_ERROR_CHARS else "…" + text[-MAX_ERROR_CHARS:]


class Worker:
    def __init__(self, sock: socket.socket) -> None:
        import torch

        from kernelcraft.engine import channel, tensors

        self.sock = sock
        self.torch = torch
        self.channel = channel
        self.tensors = tensors
        self.device = "cpu"
        self.cuda_ipc = False
        self._compiled: Any = None
        self.harness_stream: Any = None
        """CUDA only: the stream current before the candidate was imported; restored after every
        call of the candidate's code (`restore_stream`)."""

    # ---- messaging ----

    def send(self, header: dict[str, Any], blobs: list[bytes] | None = None) -> None:
        self.channel.send_frame(self.sock, header, blobs)

    def recv(self) -> Any:
        return self.channel.recv_frame(self.sock)

    def task_error(self, e: BaseException) -> None:
        """Tell the parent the trusted task itself failed (called inside the `except`)."""
        self.send({"type": "task_error", "error": _trim(traceback.format_exc()), "summary": repr(e)})

    def progress(self, message: str) -> None:
        self.send({"type": "progress", "message": message})

    def pack(self, obj: Any) -> tuple[Any, list[bytes]]:
        blobs: list[bytes] = []
        return self.tensors.pack(obj, blobs, cuda_ipc=self.cuda_ipc), blobs

    def unpack_cloned(self, rec: Any, blobs: list[bytes]) -> Any:
        obj = self.tensors.unpack(rec, blobs)
        return self._map(obj, lambda t: t.clone())

    def _map(self, obj: Any, fn: Any) -> Any:
        if isinstance(obj, self.torch.Tensor):
            return fn(obj)
        if isinstance(obj, (list, tuple)):
            items = [self._map(x, fn) for x in obj]
            return tuple(items) if isinstance(obj, tuple) else items
        if isinstance(obj, dict):
            return {k: self._map(v, fn) for k, v in obj.items()}
        return obj

    def sync(self) -> None:
        if self.device.startswith("cuda"):
            self.torch.cuda.synchronize()

    # ---- shared by both roles ----

    def load_task(self, job: dict[str, Any], workdir: Path) -> Any:
        from kernelcraft.engine.loading import import_source

        return import_source(job["task_source"], workdir, "kernelcraft_task")

    def init_inputs(self, task: Any, seed0: int) -> list[Any]:
        self.torch.manual_seed(seed0)
        return list(task.get_init_inputs())

    def build(self, cls: Any, init: list[Any], seed0: int) -> Any:
        self.torch.manual_seed(seed0)
        model = cls(*init)
        return model.to(self.device).eval() if hasattr(model, "to") else model

    def make_inputs(self, task: Any, job: dict[str, Any], input_set: int, seed: int) -> list[Any]:
        """Inputs of one trial, created on the device (no host copies of big tensors)."""
        import random

        import numpy as np

        torch = self.torch
        torch.manual_seed(seed)
        random.seed(seed)
        np.random.seed(seed % 2**32)
        small = job.get("interpret", False)
        with torch.device(self.device):
            if input_set == 0:
                fn = getattr(task, "get_cpu_inputs", None) if small else None
                inputs = list((fn or task.get_inputs)())
            else:
                fn = getattr(task, "get_cpu_input_sets", None) if small else None
                sets = list((fn or task.get_input_sets)())
                inputs = list(sets[input_set - 1])
        return [x.to(self.device) if isinstance(x, torch.Tensor) else x for x in inputs]

    def count_input_sets(self, task: Any, interpret: bool) -> int:
        fn = getattr(task, "get_cpu_input_sets", None) if interpret else None
        fn = fn or getattr(task, "get_input_sets", None)
        if fn is None:
            return 1
        with self.torch.device(self.device):
            return 1 + len(list(fn()))

    # ---- reference role ----

    def reference(self, job: dict[str, Any], workdir: Path) -> None:
        torch = self.torch
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        try:
            task = self.load_task(job, workdir)
            init = self.init_inputs(task, job["seed0"])
            model = self.build(task.Model, init, job["seed0"])
            n_sets = self.count_input_sets(task, job.get("interpret", False))
        except Exception as e:
            self.task_error(e)
            return
        self.send({"type": "task_ready", "input_sets": n_sets})
        private_inputs: list[Any] = []
        ref_out: Any = None
        shared: Any = None
        while True:
            frame = self.recv()
            op = frame.header.get("op")
            if op == "inputs":
                try:
                    private_inputs = self.make_inputs(task, job, frame.header["set"], frame.header["seed"])
                    with torch.no_grad():
                        ref_out = model(*[self._map(x, lambda t: t.clone()) for x in private_inputs])
                    self.sync()
                except Exception as e:
                    self.task_error(e)
                    return
                shared = self._map(private_inputs, lambda t: t.clone())
                self.sync()
                rec, blobs = self.pack(shared)
                self.send({"type": "inputs", "inputs": rec}, blobs)
            elif op == "compare":
                self.send(self.compare(frame, ref_out, private_inputs))
            elif op == "roofline":
                self.send(self.roofline(model, private_inputs, task, frame.header))
            elif op == "warmup_reference":
                self.send(self.compile_reference(model, private_inputs))
            elif op == "time_reference":
                self.send(self.time_reference(model, private_inputs, frame.header))
            elif op == "next":
                # The next job on the same task: forget this job's inputs and outputs and build
                # Model afresh from the same seed, exactly as a new process would.
                private_inputs, ref_out, shared = [], None, None
                self._compiled = None
                try:
                    if self.device.startswith("cuda"):
                        torch.cuda.empty_cache()
                    init = self.init_inputs(task, job["seed0"])
                    model = self.build(task.Model, init, job["seed0"])
                except Exception as e:
                    self.task_error(e)
                    return
                self.send({"type": "task_ready", "input_sets": n_sets})
            else:
                return

    def compare(self, frame: Any, ref_out: Any, private_inputs: list[Any]) -> dict[str, Any]:
        from kernelcraft.base.evaluation import Evidence
        from kernelcraft.base.failures import FailureClass
        from kernelcraft.engine.compare import compare_outputs, inputs_changed

        h = frame.header
        try:
            runs = [self.unpack_cloned(rec, frame.blobs) for rec in h["outputs"]]
            after = self.unpack_cloned(h["inputs_after"], frame.blobs)
        except Exception as e:
            ev = Evidence(message=f"the candidate sent outputs that cannot be read: {e}")
            return {
                "type": "compared",
                "failure_class": FailureClass.RUNTIME_CRASH.value,
                "evidence": ev.model_dump(),
                # opening them may have left a CUDA error behind: the parent does not keep this process
                "error": _trim(f"{type(e).__name__}: {e}"),
            }
        self.sync()
        for i, out in enumerate(runs):
            verdict = compare_outputs(ref_out, out)
            if verdict is not None:
                cls, ev = verdict
                if i > 0:
                    cls = FailureClass.NONDETERMINISTIC
                    ev.message = (
                        "a second run on the same inputs, with different garbage in memory underneath, "
                        f"gave a different answer ({ev.message}); the kernel reads memory it did not write"
                    )
                return {"type": "compared", "failure_class": cls.value, "evidence": ev.model_dump()}
        changed = inputs_changed(private_inputs, list(after))
        if changed is not None:
            return {
                "type": "compared",
                "failure_class": FailureClass.INPUTS_MUTATED.value,
                "evidence": changed.model_dump(),
            }
        return {"type": "compared", "failure_class": None}

    def roofline(self, model: Any, inputs: list[Any], task: Any, header: dict[str, Any]) -> dict[str, Any]:
        """FLOPs and bytes of the reference. In the interpreter the trials use small inputs, so the
        floor is counted on the full-size `get_inputs()` built on the meta device (no memory, no
        compute); if the model cannot run on meta, on the trial's inputs."""
        from kernelcraft.engine import roofline

        errors = []
        if header.get("full_size"):
            try:
                import copy

                torch = self.torch
                torch.manual_seed(0)
                with torch.device("meta"):
                    meta_inputs = list(task.get_inputs())
                meta_model = copy.deepcopy(model).to("meta")
                r = roofline.roofline_for(meta_model, meta_inputs, header["target"])
                return {"type": "roofline", "roofline": r.model_dump(), "shapes": "get_inputs()"}
            except Exception as e:
                errors.append(f"{type(e).__name__}: {e}")
        try:
            r = roofline.roofline_for(model, inputs, header["target"])
            return {
                "type": "roofline",
                "roofline": r.model_dump(),
                "shapes": "trial inputs",
                "errors": errors,
            }
        except Exception as e:
            return {"type": "roofline", "roofline": None, "error": _trim(f"{type(e).__name__}: {e}")}

    def compile_reference(self, model: Any, inputs: list[Any]) -> dict[str, Any]:
        """torch.compile the reference and run it once (before the GPU lock is taken)."""
        try:
            with self.torch.no_grad():
                self._compiled = self.torch.compile(model)
                self._compiled(*inputs)
            self.sync()
        except Exception as e:
            self._compiled = None
            return {"type": "warm", "error": _trim(f"{type(e).__name__}: {e}")}
        return {"type": "warm"}

    def time_reference(self, model: Any, inputs: list[Any], header: dict[str, Any]) -> dict[str, Any]:
        """One round of reference timing, eager and torch.compile'd (compiled once, on first use)."""
        try:
            from kernelcraft.engine import timing

            torch = self.torch
            out: dict[str, Any] = {"type": "timed"}
            methods = header.get("methods", {})
            with torch.no_grad():
                timed: list[tuple[str, Any]] = [("eager", model)]
                if header.get("compiled", True):
                    if self._compiled is None:
                        self._compiled = torch.compile(model)
                        self._compiled(*inputs)
                        self.sync()
                    timed.append(("compiled", self._compiled))
                for key, fn in timed:
                    r = timing.sample_round(
                        fn,
                        budget_ms=header.get("budget_ms", 100.0),
                        method=methods.get(key, "auto"),
                        input_sets=lambda: self._map(inputs, lambda t: t.clone()),
                    )
                    out[key] = {"times_us": r.times_us, "method": r.method, "sets": r.sets}
            return out
        except Exception as e:
            return {"type": "timed", "error": _trim(traceback.format_exc()), "summary": repr(e)}

    # ---- candidate role ----

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


def _import_base() -> None:
    import numpy  # noqa: F401
    import torch  # noqa: F401
    import triton  # noqa: F401  (imported before any job: the pool's workers start warm)
    import triton.language  # noqa: F401

    from kernelcraft.base import evaluation, failures  # noqa: F401
    from kernelcraft.engine import compare, guard, launches, loading, roofline  # noqa: F401


def _import_dynamo() -> None:
    from kernelcraft.engine import guard

    guard.Integrity()  # imports torch._dynamo and runs the dispatch-mode machinery once


def _import_inductor() -> None:
    import torch._inductor.compile_fx  # noqa: F401

    from kernelcraft.engine import timing  # noqa: F401  (captures the timers; no candidate yet)


def import_stages(*, cuda: bool) -> list[tuple[str, Any]]:
    """One-off costs a worker pays before it reports ready, so they fall outside every job's
    time: torch, Triton and the harness modules; torch._dynamo (which the op recorder's dispatch
    mode pulls in lazily, ~1 s); on a GPU, torch's inductor (what the reference's torch.compile
    imports). In order; the zygote runs each stage that leaves the GPU driver alone."""
    stages: list[tuple[str, Any]] = [("base", _import_base), ("dynamo", _import_dynamo)]
    if cuda:
        stages.append(("inductor", _import_inductor))
    return stages


def prepare(*, cuda: bool) -> None:
    """Everything a worker imports before it can take a job (what is imported already costs
    nothing again)."""
    for _name, stage in import_stages(cuda=cuda):
        stage()


def serve(fd: int) -> None:
    """Say `ready` on the socket `fd` (after initialising CUDA on a GPU), take one job and run it.
    Called in a spawned worker, or in a worker the zygote forked (which imports here what the
    zygote could not import without touching the GPU)."""
    import torch

    want = os.environ.get("KERNELCRAFT_WORKER_DEVICE", "cpu")
    prepare(cuda=want == "cuda")

    sock = socket.socket(fileno=fd)
    os.set_inheritable(fd, False)
    # Nothing but this process's own code talks on the socket; its stdout is a log file.
    worker = Worker(sock)
    info: dict[str, Any] = {"type": "ready", "pid": os.getpid()}
    if want == "cuda":
        torch.cuda.init()
        torch.empty(1, device="cuda")
        worker.device = "cuda"
        worker.cuda_ipc = True
        info["device"] = f"cuda:0 ({torch.cuda.get_device_name(0)})"
    else:
        torch.set_num_threads(1)
        info["device"] = "cpu"
    worker.send(info)
    try:
        frame = worker.recv()
    except Exception:
        return
    job = frame.header
    workdir = Path(job["workdir"])
    if job.get("role") == "reference":
        worker.reference(job, workdir)
    elif job.get("role") == "candidate":
        worker.candidate(job, workdir)


def main() -> None:
    serve(int(sys.argv[1]))


if __name__ == "__main__":
    main()
