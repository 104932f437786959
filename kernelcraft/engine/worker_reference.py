"""The reference role of a worker process (moved from `worker.py`)."""

from __future__ import annotations

import traceback
from pathlib import Path
from typing import Any

from kernelcraft.engine.worker_common import Worker, _trim


class ReferenceWorker(Worker):
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
