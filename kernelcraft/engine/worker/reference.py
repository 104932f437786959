"""`ReferenceWorker`: the trusted role of a worker process (see `worker/main.py`): trusted by the
candidate's verdict, never by the server. The task is a client's code too, so it loads inside the
same box as a candidate (box/__init__.py), closed before its first line runs.

It loads only the task and builds `Model` after `torch.manual_seed(seed0)`; for each trial it
draws inputs from the seed the job sends, computes the reference outputs, shares a copy of the
inputs, and later compares what the candidate returned against its own private copies (outputs,
and inputs for mutation). It also counts FLOPs and bytes and times the reference for profile. It
never imports candidate code, so the job may keep it for the next job on the same task
(`NextJob`: state dropped, `Model` rebuilt from the seed).
"""

from __future__ import annotations

import traceback
from pathlib import Path
from typing import Any

from kernelcraft.engine.checks import perturb, scaled
from kernelcraft.engine.wire.protocol import (
    AuditTimed,
    Compare,
    Compared,
    ComputeRoofline,
    FreshReplay,
    InputsMade,
    Load,
    MakeInputs,
    NextJob,
    Ok,
    Perturb,
    Replayed,
    Reply,
    RooflineCounted,
    Samples,
    Sized,
    TaskReady,
    Timed,
    TimeReference,
    Warm,
    WarmupReference,
    parse_request,
)
from kernelcraft.engine.worker.common import Worker, error_line, trim


class ReferenceWorker(Worker):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.job: Load | None = None
        self.task: Any = None
        self.full_task: Any = None
        """The task as given, when the trials run on a shrunk copy (`self.task`): the roofline
        counts its sizes."""
        self.model: Any = None
        self.input_sets = 0
        """Counted when Model is first built."""
        self.private_inputs: list[Any] = []
        self.made_shapes: dict[int, list[Any]] = {}  # input set -> shapes made (fresh.input_shapes)
        self.ref_out: Any = None
        self.model_after: list[Any] | None = None
        self.shared: Any = None
        """The copy of the inputs sent to the candidate: kept alive while it may read them
        (through CUDA IPC handles on a GPU)."""
        self.compiled: Any = None
        self.compiles = 0
        """torch.compile's of Model in this process (`refcompile.compile_reference`)."""
        self.compare_warm = False
        """The comparison's GPU kernels have run once in this process (`warm_compare`)."""

    def run(self, job: Load, workdir: Path) -> None:
        """Load the task and measure it (`sized`), then answer requests until one it does not know
        (the first is `next`: build Model)."""
        torch = self.torch
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        self.job = job
        if job.sandbox:
            from kernelcraft.engine import box

            # The task is a client's code (an MCP or HTTP client may send it): it runs in the same
            # box as a candidate, closed before its first line is imported.
            box.confine(workdir)
        try:
            self.task = self.load_task(job, workdir)
        except Exception as e:
            self.task_error(e)
            return
        # The job checks the sizes and reserves the memory, then asks for Model (`NextJob`).
        self.send(self.sized(job, workdir))
        while True:
            frame = self.recv()
            req = parse_request(frame.header)
            if isinstance(req, MakeInputs):
                if not self.make_trial(req):
                    return
            elif isinstance(req, Compare):
                try:
                    compared = self.compare(req, frame.blobs)
                except Exception as e:  # ours (out of memory comparing?): not the candidate's verdict
                    self.task_error(e, "the reference compared the candidate's outputs (out of memory?)")
                    return
                self.send(compared)
            elif isinstance(req, FreshReplay):
                try:
                    replayed = self.fresh_replay(req, frame.blobs)
                except Exception as e:  # ours (making inputs, running Model): not the candidate's verdict
                    self.task_error(e, "the reference re-ran the candidate's record on fresh inputs")
                    return
                self.send(replayed)
            elif isinstance(req, AuditTimed):
                try:
                    compared = self.audit_timed(req, frame.blobs)
                except Exception as e:  # ours (making inputs, running Model): not the candidate's verdict
                    self.task_error(e, "the reference checked the candidate's timed calls")
                    return
                self.send(compared)
            elif isinstance(req, ComputeRoofline):
                self.send(self.roofline(req))
            elif isinstance(req, WarmupReference):
                self.send(self.compile_reference(gated=req.gated))
            elif isinstance(req, TimeReference):
                self.send(self.time_reference(req))
            elif isinstance(req, Perturb):
                try:
                    self.perturb_model(self.model, req.seed)
                except Exception as e:
                    self.task_error(e, "the reference gave Model fresh parameter values")
                    return
                self.send(Ok())
            elif isinstance(req, NextJob):
                if not self.next_job():
                    return
            else:
                return

    def sized(self, job: Load, workdir: Path) -> Sized:
        """Measure the task on the meta device (and, in the interpreter, shrink it when it is too
        big for it: `self.task` becomes the shrunk copy); the figures for the job."""
        from kernelcraft.engine.source.multiples import Multiples
        from kernelcraft.engine.worker import sizing
        from kernelcraft.engine.worker.common import import_source

        free, total = sizing.device_memory(self.device)
        try:
            sizes = sizing.measure(self.task, job.interpret, quick=True)
        except Exception as e:
            return Sized(device_free=free, device_total=total, error=error_line(e)[:500])
        full_dims = sizes["dims"]
        plan = sizing.Shrunk(self.task, sizes)
        load = lambda src, tag: import_source(src, workdir, f"kernelcraft_task_{tag}")  # noqa: E731
        if job.interpret and not job.full_size and job.cpu_sizes:  # the user's sizes, as given
            try:
                plan = sizing.given_sizes(job.task_source, job.cpu_sizes, load)
            except Exception as e:  # their sizes are the task's error: it says which
                return Sized(device_free=free, device_total=total, error=error_line(e)[:500])
        elif job.interpret and not job.full_size:
            try:
                plan = sizing.shrink_keeping(
                    job.task_source,
                    self.task,
                    sizes,
                    load,
                    Multiples.of(job.cpu_divisors, job.cpu_untiled, job.cpu_flat),
                    job.model_mode,
                    job.correctness,
                )
            except Exception:  # the task as given still runs (or is refused for its size)
                plan = sizing.Shrunk(self.task, sizes)
        sizes = plan.sizes
        if plan.source is not None:
            self.full_task, self.task = self.task, plan.task
        return Sized(
            inputs_bytes=sizes["inputs"],
            params_bytes=sizes["params"],
            outputs_bytes=sizes["outputs"],
            outputs_measured=sizes["outputs_measured"],
            elements=sizes["elements"],
            shapes=sizes["shapes"],
            device_free=free,
            device_total=total,
            has_cpu_inputs=hasattr(self.task, "get_cpu_inputs"),
            shrunk=plan.changes,
            shrunk_source=plan.source,
            not_shrunk=plan.not_shrunk,
            probe=plan.probe,
            multiples=plan.multiples,
            multiples_dropped=plan.dropped,
            trial_dims=sizes["dims"] if plan.source is not None else [],
            full_dims=full_dims if plan.source is not None else [],
        )

    def make_trial(self, req: MakeInputs) -> bool:
        """One trial's inputs and reference outputs (both kept), a copy of the inputs sent; False if
        the task failed (reported)."""
        from kernelcraft.engine.checks.compare import inputs_changed

        assert self.job is not None
        torch = self.torch
        try:
            self.private_inputs = self.make_inputs(self.task, self.job, req.input_set, req.seed)
            if req.scale is not None and scaled.task_allows(self.task):
                self.private_inputs = scaled.scale_inputs(self.private_inputs, req.scale)
            given = [self._map(x, lambda t: t.clone()) for x in self.private_inputs]
            with torch.no_grad():
                self.ref_out = self.model(*given)
            self.sync()  # Model may write its inputs (KernelBench has such): a candidate may too
            self.model_after = given if inputs_changed(self.private_inputs, given) is not None else None
        except Exception as e:
            self.task_error(e)
            return False
        self.made_shapes.setdefault(req.input_set, []).append(self.shapes(self.private_inputs))
        self.shared = self._map(self.private_inputs, lambda t: t.clone())
        self.sync()
        rec, blobs = self.pack(self.shared)
        self.send(InputsMade(inputs=rec), blobs)
        if not self.compare_warm and self.device.startswith("cuda"):
            self.warm_compare()
        return True

    def warm_compare(self) -> None:
        """Once per process, as the candidate compiles: compare slices of these outputs and inputs with
        themselves, loading the comparison's GPU kernels before the first trial (0.3 s on the H200)."""
        from kernelcraft.engine.checks.compare import compare_outputs, inputs_changed

        self.compare_warm = True
        try:
            ref = self._map(self.ref_out, lambda t: t.reshape(-1)[:256].clone())
            compare_outputs(ref, self._map(ref, lambda t: t.clone()))
            ins = list(self._map(self.private_inputs, lambda t: t.reshape(-1)[:256].clone()))
            inputs_changed(ins, [self._map(x, lambda t: t.clone()) for x in ins])
            self.sync()
        except Exception:  # only a warm-up: the trials' comparisons report their own errors
            pass

    def next_job(self) -> bool:
        """Build Model for the (next) job on the task: forget the last job's inputs and outputs
        and build Model afresh from the same seed, exactly as a new process would. False when that
        failed. The first comes once the job has checked the task's sizes; the next when the job
        parks this worker (so it idles without the last job's tensors)."""
        assert self.job is not None
        self.private_inputs, self.ref_out, self.shared, self.made_shapes = [], None, None, {}
        self.compiled, self.model = None, None
        try:
            if self.device.startswith("cuda"):
                self.torch.cuda.empty_cache()
            init = self.init_inputs(self.task, self.job.seed0)
            self.model = self.build(self.task.Model, init, self.job.seed0, self.job.model_mode)
            if self.input_sets == 0:
                self.input_sets = self.count_input_sets(self.task, self.job.interpret)
        except Exception as e:
            self.task_error(e)
            return False
        self.send(
            TaskReady(
                input_sets=self.input_sets,
                mode_sensitive=perturb.mode_sensitive(self.torch, self.model),
                parameters=perturb.named_signature(self.model),
                initial_values=self.initial_values,
                perturb_allowed=perturb.task_allows(self.task),
            )
        )
        return True

    def compare(self, req: Compare, blobs: list[bytes]) -> Compared:
        from kernelcraft.base.failures import FailureClass
        from kernelcraft.engine.checks.compare import Margin, compare_outputs, describe, inputs_left_wrong
        from kernelcraft.schema.evaluation import Evidence

        try:
            runs = [self.unpack_cloned(rec, blobs) for rec in req.outputs]
            after = self.unpack_cloned(req.inputs_after, blobs)
        except Exception as e:
            ev = Evidence(message=f"the candidate sent outputs that cannot be read: {e}")
            return Compared(
                failure_class=FailureClass.RUNTIME_CRASH.value,
                evidence=ev.model_dump(),
                # opening them may have left a CUDA error behind: the parent does not keep this process
                error=error_line(e),
            )
        self.sync()
        assert self.job is not None
        if len(runs) != req.runs:  # zero output sets is never "nothing compared, nothing differs"
            ev = Evidence(
                message=f"the candidate's process sent {len(runs)} output set(s) for {req.runs} run(s)"
            )
            return Compared(failure_class=FailureClass.FORBIDDEN_CONSTRUCT.value, evidence=ev.model_dump())
        rule = self.job.correctness
        tolerance = describe(self.ref_out, rule)
        margins: list[Margin] = []
        for i, out in enumerate(runs):
            verdict = compare_outputs(self.ref_out, out, rule, margins)
            if verdict is not None:
                cls, ev = verdict
                if i > 0:
                    cls = FailureClass.NONDETERMINISTIC
                    ev.message = (
                        "a second run on the same inputs, with different garbage in memory underneath, "
                        f"gave a different answer ({ev.message}); the kernel reads memory it did not write"
                    )
                return Compared(failure_class=cls.value, evidence=ev.model_dump(), tolerance=tolerance)
        changed = inputs_left_wrong(self.private_inputs, self.model_after, list(after), rule)
        if changed is not None:
            return Compared(failure_class=FailureClass.INPUTS_MUTATED.value, evidence=changed.model_dump())
        worst = max(margins, key=lambda m: max(m.ratio, m.l2_ratio), default=None)
        margin = None if worst is None else worst.words()
        return Compared(failure_class=None, tolerance=tolerance, margin=margin)

    def fresh_replay(self, req: FreshReplay, blobs: list[bytes]) -> Replayed:
        """The candidate's recorded forward re-run here on fresh inputs (`replay/fresh.py`), against
        Model's outputs for them. The reference outputs wait on the host meanwhile: the re-run
        runs the candidate's kernels in this process, and a kernel may write beyond its buffers."""
        from kernelcraft.base.failures import FailureClass
        from kernelcraft.engine.replay.program import Program
        from kernelcraft.engine.worker import freshdraw

        assert self.job is not None

        def refused(message: str, **evidence: Any) -> Replayed:
            return Replayed(
                failure_class=FailureClass.FORBIDDEN_CONSTRUCT.value,
                evidence={"message": message[:2000], "op": "fresh replay", **evidence},
            )

        try:
            program = Program.model_validate(req.program)
            kept = list(self.unpack_cloned(req.kept, blobs))
        except Exception as e:  # noqa: BLE001 - the candidate's record: a verdict, never our error
            return refused(f"the candidate's record of forward cannot be read ({error_line(e)[:300]})")
        if self.job.interpret:
            from kernelcraft.engine.watch.tf32 import emulate_tf32

            emulate_tf32()  # the kernels' dots as the candidate's interpreter (and a GPU) computes them
        from kernelcraft.engine.watch.guard import ALLOWED_OPS

        allowed = None if req.allowed_ops is None else ALLOWED_OPS | frozenset(req.allowed_ops)
        # Two draws: a host number that happens to be right for one fresh draw (a count that came
        # out the same) is wrong for the other but rarely.
        seeds = (req.seed, (req.seed * 0x9E3779B97F4A7C15 + 1) % (1 << 62))
        for seed in seeds[: req.draws]:
            replayed = freshdraw.fresh_draw(
                self, program, kept, req.input_set, req.scale, seed, allowed, refused
            )
            if replayed.failure_class is not None or replayed.note is not None:
                return replayed
        return Replayed()

    def expected(
        self, input_set: int, seed: int, scale: float | None = None, answer: bool = True
    ) -> tuple[list[Any], Any]:
        """A fresh draw of the inputs from `seed` (scaled as a trial's were) and Model's outputs
        (None without `answer`)."""
        assert self.job is not None
        inputs = self.make_inputs(self.task, self.job, input_set, seed)
        if scale is not None and scaled.task_allows(self.task):
            inputs = scaled.scale_inputs(inputs, scale)
        if not answer:
            return inputs, None
        with self.torch.no_grad():
            expected = self.model(*[self._map(x, lambda t: t.clone()) for x in inputs])
        self.sync()
        return inputs, expected

    def audit_timed(self, req: AuditTimed, blobs: list[bytes]) -> Compared:
        """The timed calls the candidate kept (`measure/audit.py`), each against Model's outputs
        on the inputs drawn again from its seed."""
        from kernelcraft.base.failures import FailureClass
        from kernelcraft.engine.checks.compare import compare_outputs

        assert self.job is not None
        if req.seeds_for_claim:
            from kernelcraft.engine.measure.audit import unlike

            a, b = (self.make_inputs(self.task, self.job, 0, s) for s in req.seeds_for_claim)
            if unlike(a, b) is None:
                message = "the candidate's timing said its timed calls could not be audited, yet the task's draws can stand in for its inputs"
                return Compared(
                    failure_class=FailureClass.FORBIDDEN_CONSTRUCT.value,
                    evidence={"message": message, "op": "timed call"},
                )
            return Compared()
        try:
            got = [self.unpack_cloned(rec, blobs) for rec in req.outputs]
        except Exception as e:  # noqa: BLE001 - the candidate's outputs: a verdict, never our error
            message = f"the candidate sent timed outputs that cannot be read: {error_line(e)[:300]}"
            return Compared(
                failure_class=FailureClass.RUNTIME_CRASH.value, evidence={"message": message}, error=message
            )
        for seed, out in zip(req.seeds, got, strict=True):
            verdict = compare_outputs(self.expected(0, seed)[1], out, self.job.correctness)
            if verdict is not None:
                return Compared(failure_class=verdict[0].value, evidence=verdict[1].model_dump())
        return Compared()

    def roofline(self, req: ComputeRoofline) -> RooflineCounted:
        """FLOPs and bytes of the reference. In the interpreter the trials use small inputs, so the
        floor is counted on the full-size `get_inputs()` built on the meta device (no memory, no
        compute); if the model cannot run on meta, on the trial's inputs."""
        from kernelcraft.engine.checks.compare import tolerances
        from kernelcraft.engine.measure import roofline

        rule = self.job.correctness if self.job is not None else "kernelcraft"

        def rtol_of(dtype: Any) -> float:
            return tolerances(dtype, rule)[0]

        errors = []
        if req.full_size:
            try:
                r = roofline.on_meta(self.task, self.full_task, self.model, req.target, rtol_of)
                return RooflineCounted(roofline=r.model_dump(), shapes="get_inputs()")
            except Exception as e:
                errors.append(f"{type(e).__name__}: {e}")
        try:
            r = roofline.roofline_for(self.model, self.private_inputs, req.target, rtol_of)
            return RooflineCounted(roofline=r.model_dump(), shapes="trial inputs", errors=errors)
        except Exception as e:
            return RooflineCounted(roofline=None, error=error_line(e))

    def compile_reference(self, *, gated: bool = False) -> Warm:
        """torch.compile the reference and run it once (`self.compiled`). `gated`: the compile's
        CPU work first, then its GPU work once the job holds the GPU (`refcompile.py`)."""
        from kernelcraft.engine.worker import refcompile

        return refcompile.compile_reference(self, gated=gated)

    def time_reference(self, req: TimeReference) -> Reply:
        """One round of reference timing, eager and torch.compile'd (compiled once, on first use)."""
        try:
            from kernelcraft.engine.measure import timing

            torch = self.torch
            inputs = self.private_inputs
            samples: dict[str, Any] = {}  # the keys timed: only they go on the wire
            with torch.no_grad():
                timed: list[tuple[str, Any]] = [("eager", self.model)]
                if req.compiled:
                    if self.compiled is None:
                        self.compiled = torch.compile(self.model)
                        self.compiled(*inputs)
                        self.sync()
                    timed.append(("compiled", self.compiled))
                for key, fn in timed:
                    r = timing.sample_round(
                        fn,
                        budget_ms=req.budget_ms,
                        method=req.methods.get(key, "auto"),
                        input_sets=lambda: self._map(inputs, lambda t: t.clone()),
                        estimate=req.estimates.get(key),
                    )
                    samples[key] = Samples(
                        times_us=r.times_us, method=r.method, sets=r.sets, estimate_us=round(r.estimate_us, 3)
                    )
            timed_reply = Timed(**samples)
            if req.breakdown:
                from kernelcraft.engine.measure import kernelprof

                try:
                    # assigned whole: a field changed in place is not "set", and only set fields
                    # go on the wire
                    timed_reply.kernels = {
                        key: kernelprof.breakdown(fn, lambda: self._map(inputs, lambda t: t.clone()))
                        for key, fn in timed
                    }
                except Exception as e:  # noqa: BLE001 - informational: the timing stands without it
                    timed_reply.kernels_error = f"{type(e).__name__}: {e}"[:300]
            return timed_reply
        except Exception as e:
            return Timed(error=trim(traceback.format_exc()), summary=repr(e))
