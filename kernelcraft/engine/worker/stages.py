"""The candidate worker's compile and profile stages (`CandidateWorker` in `worker/candidate.py`
takes them in): launch discovery without running a kernel, compiling for the asked targets, the
JIT warm-up before the GPU lock is taken, and timing the candidate. No verdict on the numbers is
decided here: a timing is judged in the parent against the physical floor (`host/verdicts.py`).
Runs in the candidate worker only. Written by the evaluation engine only.
"""

from __future__ import annotations

import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

from kernelcraft.base.failures import FailureClass
from kernelcraft.engine.wire.protocol import (
    FOUND_LAUNCHES,
    Compile,
    Compiled,
    Reply,
    Samples,
    TimeCandidate,
    Timed,
    Verdict,
    Warm,
)
from kernelcraft.engine.worker.common import Worker, trim


class CandidateStages(Worker):
    """The compile and profile stages of a candidate worker (mixed into `CandidateWorker`)."""

    task: Any
    full_task: Any
    model_class: Any
    model: Any
    inputs: Any
    found_launches: dict[str, int]
    harness_stream: Any
    job: Any
    timed_kept: Any
    call: Callable[..., tuple[Any, list[str]] | None]
    """`CandidateWorker.call`: forward as a trial runs it (ops recorded, launches counted)."""

    def restore_stream(self) -> bool:
        """Set the harness's stream current again; True when the candidate had changed it."""
        timing = sys.modules.get("kernelcraft.engine.measure.timing")
        if self.harness_stream is None or timing is None:
            return False
        return bool(timing.stream_changed(self.harness_stream))

    def discover(self, full_size: bool) -> tuple[Any, str]:
        """The launches forward makes, without running a kernel, and on which shapes. When
        `full_size`: the task's own `get_inputs()` built on the meta device (Triton needs only the
        tensors' dtypes and a 16-byte-aligned address, which meta tensors have), and, where the
        trials run on a shrunk copy, `ModelNew` built from the task as given on the meta device
        too (its parameters take no memory: KernelBench level 3's MLP has 8.6 GB of them), every
        meta tensor seen as a CUDA one so that forward takes the GPU's way (`_discover_as_cuda`);
        where forward cannot run that way, on plain meta tensors. Else, or when forward or the
        build cannot run on meta, the trial's inputs and the model built at their sizes."""
        from kernelcraft.engine.watch.launches import intercept_launches
        from kernelcraft.engine.worker.sizing import shape_text

        why = ""
        torch = self.torch
        found = self.found_launches
        found.clear()
        if full_size and self.task is not None:
            full = self.full_task or self.task
            try:
                rec, meta = self._discover_as_cuda(full)
                return rec, f"get_inputs() on the meta device, seen as CUDA: {shape_text(meta)}"
            except Exception as e:
                why = f" (forward could not run on meta tensors seen as CUDA: {type(e).__name__}: {str(e)[:200]})"
                found.clear()
                self.restore_stream()
            try:
                torch.manual_seed(0)
                with torch.device("meta"):
                    meta = list(full.get_inputs())
                    model = self.model
                    if self.full_task is not None:
                        model = self.model_class(*full.get_init_inputs())
                with torch.no_grad(), intercept_launches(execute=False, on_launch=self._found) as rec:
                    model(*meta)
                self.restore_stream()
                return (
                    rec,
                    f"get_inputs() on the meta device (its own way, not CUDA's): {shape_text(meta)}{why}",
                )
            except Exception as e:
                why += f" (forward could not run on meta tensors: {type(e).__name__}: {str(e)[:200]})"
                found.clear()
        with torch.no_grad(), intercept_launches(execute=False, on_launch=self._found) as rec:
            self.model(*self._map(self.inputs, lambda t: t.clone()))
        self.restore_stream()
        leaves = [x for x in self.tensors.leaves(self.inputs) if isinstance(x, torch.Tensor)]
        return rec, f"the trial's inputs: {shape_text(leaves)}{why}"

    def _discover_as_cuda(self, full: Any) -> tuple[Any, list[Any]]:
        """Forward's launches on the task's `get_inputs()` and a `ModelNew` built on the meta
        device, every meta tensor seen as a CUDA one (`watch/fakecuda.py`): a forward that
        branches on `x.is_cuda` or `x.device.type` takes the GPU's way, whose kernels are the
        ones compiled."""
        from kernelcraft.engine.watch.fakecuda import gpu_way
        from kernelcraft.engine.watch.launches import intercept_launches

        torch = self.torch
        torch.manual_seed(0)
        with gpu_way("meta"):  # (torch.cuda's device facts too: a persistent grid's SM count)
            with torch.device("meta"):
                meta = list(full.get_inputs())
                model = self.model_class(*full.get_init_inputs())
            with torch.no_grad(), intercept_launches(execute=False, on_launch=self._found) as rec:
                model(*meta)
        self.restore_stream()
        return rec, meta

    def _found(self, record: Any) -> None:
        """Say each kernel discovery finds as it is found, and every 100th launch: a compile that
        runs out of time can then name what it had found (`JobCompile.stage`)."""
        name, found = record.launch.name, self.found_launches
        found[name] = found.get(name, 0) + 1
        total = sum(found.values())
        if total <= 20 or found[name] == 1 or total % 100 == 0:
            listed = ", ".join(f"{k} x{n}" for k, n in list(found.items())[:6])
            self.progress(f"{FOUND_LAUNCHES} {total} ({listed})")

    def compile_stage(self, req: Compile) -> Compiled:
        from kernelcraft.engine.checks.aot import compile_for_targets

        start = time.perf_counter()
        try:
            rec, shapes = self.discover(req.full_size)
            targets = compile_for_targets(rec.records, req.targets)
            if self.device.startswith("cuda"):
                from kernelcraft.engine.checks.aot import compile_host

                targets.append(compile_host(rec.records))  # the real JIT compile on this GPU
        except Exception as e:
            return Compiled(error=trim(traceback.format_exc()), summary=f"{type(e).__name__}: {e}")
        return Compiled(
            launches=[la.model_dump() for la in rec.launches],
            targets=[t.model_dump() for t in targets],
            seconds=time.perf_counter() - start,
            shapes=shapes[:600],
        )

    def time_candidate(self, req: TimeCandidate) -> tuple[Reply, list[bytes]] | None:
        """One round of timing; with `req.audit`, on fresh inputs, then a witness call, with the
        kept calls' outputs in the frame's blobs for the reference to check (`measure/audit.py`).
        None when the witness call failed (its verdict was sent)."""
        inputs = self.inputs
        blobs: list[bytes] = []
        try:
            from kernelcraft.engine.measure import timing
            from kernelcraft.engine.measure.audit import TimedAudit

            audit = None
            if req.audit is not None:
                task, job = self.task, self.job
                audit = TimedAudit(lambda seed: self.make_inputs(task, job, 0, seed), req.audit)
            self.restore_stream()
            with self.torch.no_grad():
                r = timing.sample_round(
                    self.model,
                    budget_ms=req.budget_ms,
                    method=req.method,
                    input_sets=lambda: self._map(inputs, lambda t: t.clone()),
                    audit=audit,
                )
            timed = Timed(candidate=Samples(times_us=r.times_us, method=r.method, sets=r.sets))
            if audit is not None and audit.active:  # the witness: one more call, recorded as a trial
                seed, drawn = audit.witness_draw()
                witnessed = self.call(list(drawn), float("nan"))
                if witnessed is None:
                    return None  # its verdict was sent
                audit.witnessed(seed, witnessed[0])
            if audit is not None:
                # held until the next request: on a GPU the outputs travel as CUDA IPC handles
                # into this process's memory, which the reference reads after this answer
                self.timed_kept = audit.kept
                timed.audited = [k.seed for k in audit.kept]
                timed.audit_outputs = [
                    self.tensors.pack(k.output, blobs, cuda_ipc=self.cuda_ipc) for k in audit.kept
                ]
                timed.audit_note, timed.audit_calls = audit.note, audit.calls
            if req.breakdown:
                self._breakdown(timed, {"candidate": self.model}, inputs)
            return timed, blobs
        except Exception as e:
            name = type(e).__name__
            if (
                name in ("StreamChanged", "WorkEscaped")
                and type(e).__module__ == "kernelcraft.engine.measure.timing"
            ):
                op = "torch.cuda.set_stream" if name == "StreamChanged" else "another CUDA stream"
                return Verdict(
                    failure_class=FailureClass.FORBIDDEN_CONSTRUCT.value,
                    evidence={"message": str(e), "op": op},
                ), []
            return Timed(error=trim(traceback.format_exc()), summary=repr(e)), []

    def _breakdown(self, timed: Timed, fns: dict[str, Any], inputs: Any) -> None:
        """Which kernels each of `fns` launches (kernelprof.py); the reason in `timed` if not."""
        from kernelcraft.engine.measure import kernelprof

        try:
            # assigned whole: a field changed in place is not "set", and only set fields go on the wire
            timed.kernels = {
                key: kernelprof.breakdown(fn, lambda: self._map(inputs, lambda t: t.clone()))
                for key, fn in fns.items()
            }
        except Exception as e:  # noqa: BLE001 - informational: the timing stands without it
            timed.kernels_error = f"{type(e).__name__}: {e}"[:300]
        self.restore_stream()

    def warmup(self) -> Warm:
        """Compile the kernels forward will launch without running any (launch discovery, then
        `JITFunction.warmup`), so that JIT compilation happens before the GPU lock is taken."""
        from kernelcraft.engine.watch.launches import intercept_launches

        compiled = 0
        try:
            with self.torch.no_grad(), intercept_launches(execute=False) as rec:
                self.model(*self._map(self.inputs, lambda t: t.clone()))
            self.restore_stream()
            for r in rec.records:
                grid = tuple(r.launch.grid) or (1,)
                r.jit_fn.warmup(*r.args, grid=grid, **r.kwargs)
                compiled += 1
        except Exception as e:  # the real run reports the error with its proper class
            return Warm(compiled=compiled, error=f"{type(e).__name__}: {e}"[:500])
        return Warm(compiled=compiled)
