"""Forward's record (a `replay.Tape`) written down as a `program.Program`: the candidate's side of the
fresh-input replay (`fresh.py`). Runs in the candidate's worker, after the same-input replay; what
it writes is the candidate's claim, which the reference worker trusts in nothing (whatever it
claims is what runs, on inputs it never saw). Written by the evaluation engine only.
"""

from __future__ import annotations

from typing import Any

from kernelcraft.engine.replay.program import (
    DerivedDesc,
    InputDesc,
    KernelDesc,
    LaunchStep,
    OpStep,
    Program,
    RefDesc,
    StorageDesc,
    encode_plain,
)


class Exporter:
    """Builds a `Program` from a finished `replay.Tape` (after its own replay passed)."""

    def __init__(self, tape: Any) -> None:
        self.tape = tape
        self.storages: list[StorageDesc] = []
        self.index: dict[Any, int] = {}
        self.kept: list[Any] = []
        self.kernels: list[KernelDesc] = []
        self.kernel_ids: dict[int, int] = {}

    def export(self, outputs: list[Any]) -> tuple[Program, list[Any]]:
        """The Program and the kept tensors it names (whole storages, as bytes, as they were
        before forward)."""
        from kernelcraft.engine.replay import replay

        tape = self.tape
        steps: list[OpStep | LaunchStep] = []
        for entry in tape.entries:
            if isinstance(entry, replay._Launch):
                if entry.benchmark:
                    continue
                steps.append(
                    LaunchStep(
                        kernel=self.kernel(entry.fn),
                        args=[self.value(a) for a in entry.args],
                        kwargs={k: self.value(v) for k, v in entry.kwargs.items()},
                        grid=[int(g) for g in entry.grid],
                    )
                )
            else:
                steps.append(
                    OpStep(
                        op=str(entry.func),
                        args=[self.value(a) for a in entry.args],
                        kwargs={k: self.value(v) for k, v in entry.kwargs.items()},
                        outs=[self.ref(r) for r in entry.outs],
                        created=list(entry.created),
                        value=None if entry.value is None else encode_plain(entry.value, self.kernel),
                    )
                )
        inputs = [
            InputDesc(dtype=str(t.dtype).removeprefix("torch."), shape=list(t.shape))
            for t in tape.input_order
        ]
        outs = [self.ref(tape._ref(t)) for t in outputs]
        derived = [
            DerivedDesc(value=encode_plain(value, self.kernel), expr=_expression(expr))
            for value, expr in tape.derived
        ]
        program = Program(
            inputs=inputs,
            storages=self.storages,
            steps=steps,
            kernels=self.kernels,
            outputs=outs,
            derived=derived,
        )
        return program, self.kept

    def value(self, obj: Any) -> Any:
        from kernelcraft.engine.replay.replay import Desc, Ref

        if isinstance(obj, Ref):
            return {"ref": self.ref(obj).model_dump()}
        if isinstance(obj, Desc):
            return {
                "tdesc": {
                    "base": self.ref(obj.base).model_dump(),
                    "shape": list(obj.shape),
                    "strides": list(obj.strides),
                    "block_shape": list(obj.block_shape),
                    "padding": obj.padding,
                    "round_f32_to_tf32": obj.round_f32_to_tf32,
                }
            }
        if isinstance(obj, (list, tuple)):
            tag = "tuple" if isinstance(obj, tuple) else "list"
            return {tag: [self.value(v) for v in obj]}
        if isinstance(obj, dict):
            return {"dict": {str(k): self.value(v) for k, v in obj.items()}}
        return encode_plain(obj, self.kernel)

    def ref(self, r: Any) -> RefDesc:
        return RefDesc(
            storage=self.storage(r),
            offset=r.offset,
            size=list(r.size),
            stride=list(r.stride),
            dtype=str(r.dtype).removeprefix("torch."),
        )

    def storage(self, r: Any) -> int:
        from kernelcraft.engine.replay import storage as storages

        tape = self.tape
        kept = r.key in tape.kept
        sid = r.key if kept else r.storage_id
        found = self.index.get(sid)
        if found is not None:
            return found
        if kept and r.key in tape.input_index:
            desc = StorageDesc(
                kind="input",
                index=tape.input_index[r.key],
                nbytes=tape.kept[r.key].untyped_storage().nbytes(),
            )
        elif kept:
            saved = tape._saved.get(r.key)
            data = saved if saved is not None else storages.whole(tape.kept[r.key])  # a parameter
            desc = StorageDesc(kind="kept", index=len(self.kept), nbytes=int(data.numel()))
            self.kept.append(data)
        else:
            size = max(tape._sizes.get(r.storage_id, 0), r.nbytes, 1)
            desc = StorageDesc(kind="fresh", nbytes=int(size))
        self.index[sid] = len(self.storages)
        self.storages.append(desc)
        return self.index[sid]

    def kernel(self, fn: Any) -> int:
        from kernelcraft.engine.replay import kernelsource

        found = self.kernel_ids.get(id(fn))
        if found is not None:
            return found
        index = len(self.kernels)
        self.kernel_ids[id(fn)] = index
        self.kernels.append(KernelDesc(name="", source="", globals={}))  # (a helper may recurse)
        self.kernels[index] = kernelsource.describe(fn, self.kernel)
        return index


def _expression(expr: Any) -> Any:
    """A traced number's expression (`traced.py`, nested tuples) as JSON lists, constants tagged."""
    tag = expr[0]
    if tag == "c":
        return ["c", encode_plain(expr[1], None)]
    if tag == "read":
        return ["read", int(expr[1])]
    return [tag, *(_expression(e) for e in expr[1:])]
