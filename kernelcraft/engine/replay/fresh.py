"""The fresh-input replay: forward's record (`program.py`) re-run on inputs the candidate never saw.

Runs in the reference worker, which never runs candidate Python: kernels are rebuilt from their
recorded source (`kernelsource.build`, after `kernelsource.check`), ATen ops are looked up by
their qualified name among ATen's own (and must be ops the job allows forward outside its
kernels), and every value is decoded from plain data here. The inputs are the reference's, drawn
from a seed the candidate never saw (new values, new addresses); the tensors kept on the model
are the bytes the candidate had before forward (fixed before these inputs existed); every other
storage starts as 0xFF bytes, as in the same-input replay (`replay.py`).

What forward's host code computed cannot be re-derived here, and is not: a scalar argument or a
fill value is the number forward used. A number that depended only on shapes, strides and
constants is still right for the fresh inputs (they have the trial's shapes); one computed on the
host from the input values is now wrong, and so is the answer. The exception is a host read of a
recorded op's output (`.item()`) and the numbers forward computed from such reads in host Python
(`1.0 / m`, `2 * n + 1`: `traced.py`, the record's `derived`): each read is re-read here and each
derived number re-evaluated on the fresh reads, and where one differs, every later number equal
to the recorded one (a scalar argument, an allocation or view size, a grid dimension, or a grid
dimension equal to the recorded value divided, rounded up, by one of the launch's constexprs)
takes the fresh value. A read that decides control flow (`bool(t)`), or a read too common to
trace (-1, 0, 1), cannot be re-derived: `Refused` (a derived number that common is left alone).

Written by the evaluation engine only.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from kernelcraft.engine.replay import traced
from kernelcraft.engine.replay.program import (
    LaunchStep,
    OpStep,
    Program,
    RefDesc,
    Refused,
    TensorDesc,
    decode_constant,
)
from kernelcraft.engine.replay.replay import _ALLOCATIONS, _FROM_HOST, _METADATA, _NOTHING_TO_REPLAY

GROWTH = 64
"""How far a storage may outgrow forward's where a size was traced to a host read."""


class Substitutions:
    """Host reads whose fresh value differs: recorded number -> fresh number."""

    def __init__(self) -> None:
        self.map: dict[tuple[type, Any], Any] = {}

    def add(self, step: int, recorded: Any, fresh: Any) -> None:
        if isinstance(recorded, bool) or isinstance(fresh, bool):
            raise Refused(
                f"forward's host code branched on a value read back from a kernel's output (step {step}), "
                "which is different on fresh inputs: the harness cannot re-derive what forward did next. "
                "Decide with sizes and constants on the host; keep data-dependent choices inside kernels"
            )
        if recorded in (-1, 0, 1) or (isinstance(recorded, float) and math.isnan(recorded)):
            raise Refused(
                f"forward read {recorded!r} back from a kernel's output (step {step}) and it is {fresh!r} "
                "on fresh inputs; a value that common cannot be traced to what it fed"
            )
        key = (type(recorded), recorded)
        if key in self.map and self.map[key] != fresh:
            raise Refused(
                f"two host reads gave {recorded!r} in forward and differ on fresh inputs (step {step})"
            )
        self.map[key] = fresh

    def number(self, x: Any) -> Any:
        if not self.map or isinstance(x, bool) or not isinstance(x, (int, float)):
            return x
        return self.map.get((type(x), x), x)

    def grid(self, g: int, divisors: list[int]) -> int:
        if not self.map:
            return g
        direct = self.map.get((int, g))
        if direct is not None:
            return int(direct)
        for (kind, old), new in self.map.items():
            if kind is int and old > 0:
                for d in divisors:
                    if d > 1 and -(-old // d) == g:
                        return -(-int(new) // d)
        return g

    def ref(self, r: RefDesc) -> RefDesc:
        if not self.map:
            return r
        size = [int(self.number(s)) for s in r.size]
        if size == r.size:
            return r
        stride = r.stride
        if r.stride == _contiguous(r.size):
            stride = _contiguous(size)
        return RefDesc(storage=r.storage, offset=r.offset, size=size, stride=stride, dtype=r.dtype)


def _contiguous(size: list[int]) -> list[int]:
    out, acc = [], 1
    for s in reversed(size):
        out.append(acc)
        acc *= max(s, 1)
    return list(reversed(out))


class FreshMemory:
    """The re-run's storages: the fresh inputs, the kept bytes, 0xFF for every other one."""

    def __init__(self, program: Program, inputs: list[torch.Tensor], kept: list[torch.Tensor], device: Any):
        self.program = program
        self.inputs = inputs
        self.kept = kept
        self.device = device
        self.fresh: dict[int, torch.Tensor] = {}
        self.grows = False
        """A host read differed: sizes traced to it may outgrow what forward allocated."""

    def storage(self, r: RefDesc) -> torch.UntypedStorage:
        from kernelcraft.engine.wire.tensors import DTYPES

        if not 0 <= r.storage < len(self.program.storages):
            raise Refused("forward's record names a storage it does not list")
        desc = self.program.storages[r.storage]
        if desc.kind == "input":
            if not 0 <= desc.index < len(self.inputs):
                raise Refused("forward's record names an input the task does not have")
            return self.inputs[desc.index].untyped_storage()
        if desc.kind == "kept":
            if not 0 <= desc.index < len(self.kept):
                raise Refused("forward's record names a kept tensor it did not send")
            return self.kept[desc.index].untyped_storage()
        dtype = DTYPES.get(r.dtype)
        need = _extent(r, dtype)
        if need > desc.nbytes and (not self.grows or need > GROWTH * desc.nbytes + (1 << 20)):
            raise Refused("forward's record names a view beyond its storage")
        buf = self.fresh.get(r.storage)
        if buf is None or buf.numel() < need:
            grown = torch.full((max(desc.nbytes, need, 1),), 255, dtype=torch.uint8, device=self.device)
            if buf is not None:
                grown[: buf.numel()].copy_(buf)
            buf = self.fresh[r.storage] = grown
        return buf.untyped_storage()

    def view(self, r: RefDesc) -> torch.Tensor:
        from kernelcraft.engine.wire.tensors import DTYPES

        dtype = DTYPES.get(r.dtype)
        if dtype is None:
            raise Refused(f"forward's record names the dtype {r.dtype!r}")
        st = self.storage(r)
        if _extent(r, dtype) > st.nbytes():
            raise Refused("forward's record names a view beyond its storage")
        t = torch.empty(0, dtype=dtype, device=self.device)
        return t.set_(st, r.offset, r.size, r.stride)


def _extent(r: RefDesc, dtype: torch.dtype | None) -> int:
    if dtype is None or any(s == 0 for s in r.size):
        return 0
    if r.offset < 0 or any(s < 0 for s in r.size) or any(st < 0 for st in r.stride):
        raise Refused("forward's record names a view with a negative size, stride or offset")
    last = r.offset + sum((s - 1) * st for s, st in zip(r.size, r.stride, strict=True))
    return (last + 1) * torch.empty((), dtype=dtype).element_size()


class Runner:
    """One re-run of a `Program`."""

    def __init__(
        self, program: Program, memory: FreshMemory, kernels: list[Any], allowed: frozenset[str] | None
    ):
        self.program = program
        self.memory = memory
        self.kernels = kernels
        self.allowed = allowed
        self.subst = Substitutions()
        self.reads: list[Any] = []
        """The fresh value of each host read so far, in order."""
        self.derived_done = 0
        """How many of `program.derived` have been evaluated on the fresh reads."""

    def decode(self, value: Any, number: bool = True) -> Any:
        """A recorded value: tensors as views of this re-run's memory, kernels rebuilt, numbers
        traced through the host reads (unless `number` is False: a constexpr)."""
        if isinstance(value, dict) and len(value) == 1:
            ((tag, inner),) = value.items()
            if tag == "ref":
                return self.memory.view(self.subst.ref(RefDesc.model_validate(inner)))
            if tag == "tdesc":
                return self.descriptor(inner, number)
            if tag == "kernel":
                if not isinstance(inner, int) or not 0 <= inner < len(self.kernels):
                    raise Refused("forward's record names a kernel it does not list")
                return self.kernels[inner]
            if tag in ("list", "tuple") and isinstance(inner, list):
                items = [self.decode(v, number) for v in inner]
                return tuple(items) if tag == "tuple" else items
            if tag == "dict" and isinstance(inner, dict):
                return {str(k): self.decode(v, number) for k, v in inner.items()}
        out = decode_constant(value)
        return self.subst.number(out) if number else out

    def derive(self, index: int) -> None:
        """Evaluate, on the fresh reads so far, the numbers forward derived from its reads
        (`traced.py`) in the order it computed them; where one differs from the trial's, it takes
        the fresh number as a read does. A derived value as common as -1, 0 or 1 is left to the
        rest of the tracing (a grid divided by a constexpr), as it cannot be told from a constant."""
        derived = self.program.derived
        while self.derived_done < len(derived):
            item = derived[self.derived_done]
            last = _last_read(item.expr)
            if last >= traced.MAX_READS:  # (the candidate's process traces no more: a forged record)
                raise Refused(
                    f"forward's record derives a number from its host read {last + 1}; only the first "
                    f"{traced.MAX_READS} reads of a forward are traced (a whole answer read back element "
                    "by element and computed in Python is host work)"
                )
            if last >= len(self.reads):
                return
            self.derived_done += 1
            try:
                fresh = traced.evaluate(item.expr, self.reads)
            except traced.Unevaluable as e:
                raise Refused(str(e)) from e
            recorded = decode_constant(item.value)
            if traced.same_number(fresh, recorded) or recorded in (-1, 0, 1):
                continue
            self.subst.add(index, recorded, fresh)
            self.memory.grows = True

    def descriptor(self, inner: Any, number: bool) -> Any:
        """A host-side `TensorDescriptor` of the record rebuilt over this re-run's memory; its
        shape and strides traced through the host reads, and held within its base's storage."""
        from kernelcraft.engine.replay.descriptors import Desc, descriptor

        try:
            d = TensorDesc.model_validate(inner)
        except ValueError as e:
            raise Refused(f"forward's record has a malformed tensor descriptor ({str(e)[:200]})") from e
        base = self.memory.view(self.subst.ref(d.base))
        desc = Desc(
            None,  # type: ignore[arg-type]  # (the base is rebuilt above)
            tuple(d.shape),
            tuple(d.strides),
            tuple(d.block_shape),
            d.padding,
            d.round_f32_to_tf32,
        )
        shape = [int(self.subst.number(x)) if number else x for x in d.shape]
        strides = [int(self.subst.number(x)) if number else x for x in d.strides]
        if len(shape) != len(strides) or not 1 <= len(shape) <= 5:
            raise Refused("forward's record has a tensor descriptor of another rank than its strides")
        if any(x < 0 for x in [*shape, *strides]) or any(b <= 0 for b in d.block_shape):
            raise Refused("forward's record has a tensor descriptor with a negative size or stride")
        if all(x > 0 for x in shape):
            last = base.storage_offset() + sum((x - 1) * st for x, st in zip(shape, strides, strict=True))
            if (last + 1) * base.element_size() > base.untyped_storage().nbytes():
                raise Refused("forward's record has a tensor descriptor beyond its base tensor's storage")
        try:
            return descriptor(base, desc, lambda x: self.subst.number(x) if number else x)
        except (ValueError, AssertionError, TypeError) as e:
            raise Refused(f"forward's record has a tensor descriptor Triton refuses ({str(e)[:200]})") from e

    def values(self, args: list[Any]) -> list[Any]:
        return [self.decode(v) for v in args]

    def keywords(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        return {str(k): self.decode(v) for k, v in kwargs.items()}

    def run(self) -> list[torch.Tensor]:
        with torch.no_grad():
            for i, step in enumerate(self.program.steps):
                if isinstance(step, LaunchStep):
                    self.launch(step)
                else:
                    self.op(i + 1, step)
            return [self.memory.view(self.subst.ref(r)) for r in self.program.outputs]

    def launch(self, step: LaunchStep) -> None:
        kernel, args, kwargs, grid = self.launch_args(step)
        kernel.run(*args, grid=grid, warmup=False, **kwargs)

    def launch_args(self, step: LaunchStep) -> tuple[Any, list[Any], dict[str, Any], tuple[int, ...]]:
        """The kernel of a launch and what it is called with in this re-run."""
        from kernelcraft.engine.watch.records import jit_function_for

        if not 0 <= step.kernel < len(self.kernels):
            raise Refused("forward's record launches a kernel it does not list")
        kernel = self.kernels[step.kernel]
        params = jit_function_for(kernel).params
        constexpr = {p.name for p in params if p.is_constexpr}
        names = [p.name for p in params]
        args = [
            self.decode(v, number=not (i < len(names) and names[i] in constexpr))
            for i, v in enumerate(step.args)
        ]
        kwargs = {k: self.decode(v, number=k in names and k not in constexpr) for k, v in step.kwargs.items()}
        divisors = [
            v
            for k, v in [*zip(names, args, strict=False), *kwargs.items()]
            if k in constexpr and type(v) is int
        ]
        if not 1 <= len(step.grid) <= 3:
            raise Refused("forward's record has a launch with a malformed grid")
        grid = tuple(self.subst.grid(int(g), divisors) for g in step.grid)
        return kernel, args, kwargs, grid

    def op(self, index: int, step: OpStep) -> None:
        func = _aten(step.op)
        from kernelcraft.engine.watch.guard import op_name

        name = op_name(func)
        if self.allowed is not None and name not in self.allowed:
            raise Refused(f"forward's record runs aten.{name}, which forward may not run outside its kernels")
        if name in _FROM_HOST:
            raise Refused(
                f"forward made a tensor from host values (aten.{name}, step {index}): the harness cannot "
                "re-derive values computed on the host; make constant tensors in __init__"
            )
        if name in ("_local_scalar_dense", "is_nonzero"):
            fresh = func(*self.values(step.args), **self.keywords(step.kwargs))
            if step.value is not None:
                recorded = decode_constant(step.value)
                if not traced.same_number(fresh, recorded):
                    self.subst.add(index, recorded, fresh)
                    self.memory.grows = True
            self.reads.append(fresh)
            self.derive(index)
            return
        if name in _NOTHING_TO_REPLAY or name in _ALLOCATIONS or name in _METADATA:
            return
        if not step.created and not func._schema.is_mutable:
            return  # a view: no bytes of its own
        result = func(*self.values(step.args), **self.keywords(step.kwargs))
        made = [t for t in _flat(result) if isinstance(t, torch.Tensor)]
        for i in step.created:
            if 0 <= i < len(made) and i < len(step.outs):
                self.memory.view(self.subst.ref(step.outs[i])).copy_(made[i])


READS_HINT = (
    " (forward read values back from its kernels: a number it computed from them is re-derived on "
    "the fresh inputs only through + - * / // % ** abs, round(), math.floor, ceil and trunc, from "
    "its first 8 reads; math.sqrt, int() or float() of it, a branch on it, or a later read give "
    "the trial's number: use ** 0.5, or compute it in a kernel)"
)
"""Added to a wrong answer's words where the record reads values back (`traced.py`'s limits)."""


def reads_back(program: Program) -> bool:
    """Whether forward read a value back from a tensor on the host (`.item()`, `bool(t)`)."""
    return any(isinstance(s, OpStep) and s.value is not None for s in program.steps)


def _last_read(expr: Any, depth: int = 0) -> int:
    """The highest read an expression names (-1: none); malformed ones are `evaluate`'s to refuse."""
    if not isinstance(expr, list) or not expr or depth > traced.MAX_DEPTH + 1:
        return -1
    if expr[0] == "read":
        return expr[1] if len(expr) == 2 and type(expr[1]) is int else -1
    return max((_last_read(e, depth + 1) for e in expr[1:] if isinstance(e, list)), default=-1)


def _flat(obj: Any) -> list[Any]:
    if isinstance(obj, (list, tuple)):
        return [x for item in obj for x in _flat(item)]
    return [obj]


def _aten(qualified: str) -> Any:
    parts = qualified.split(".")
    if len(parts) != 3 or parts[0] != "aten":
        raise Refused(f"forward's record runs {qualified[:80]!r}, which is not an ATen operator")
    packet = getattr(torch.ops.aten, parts[1], None)
    overload = getattr(packet, parts[2], None) if packet is not None else None
    if not isinstance(overload, torch._ops.OpOverload):
        raise Refused(f"forward's record runs {qualified[:80]!r}, which is not an ATen operator")
    return overload


def input_shapes(
    program: Program, made: list[list[list[int]]], fresh: list[list[int]]
) -> tuple[str | None, str | None]:
    """(why the record is refused, a note) on its input shapes. The record's shapes are the
    candidate's claim, held to the shapes this worker made for the trials of its input set
    (`made`): a record claiming others is not the record of a trial (before, a claim that differed
    from the fresh draw skipped the re-run as a task whose shapes vary). Only where the fresh draw's
    shapes differ from the trial's, the task's own doing, is it not re-run (the note)."""
    claimed = [list(d.shape) for d in program.inputs]
    if claimed not in made:
        said = made[-1] if made else "none"
        return (
            f"forward's record says its input tensors had the shapes {claimed[:4]}; the reference made "
            f"{said} for that trial: the record is not the one of the trial's forward",
            None,
        )
    if fresh != claimed:
        return None, f"not re-run on fresh inputs: the task's inputs change shape between draws ({fresh[:4]})"
    return None, None


def run_program(
    program: Program, inputs: list[torch.Tensor], kept: list[torch.Tensor], allowed: frozenset[str] | None
) -> list[torch.Tensor]:
    """Forward's record re-run on `inputs` (the fresh ones, laid out as the candidate got its own:
    contiguous, in the order of `program.inputs`): its outputs. Raises `Refused` for a record that
    cannot be re-run here, `kernelsource.KernelRefused` for a kernel that is not Triton language,
    and whatever a kernel or op raises."""
    from kernelcraft.engine.replay import kernelsource
    from kernelcraft.engine.wire.tensors import DTYPES

    if len(inputs) != len(program.inputs):
        raise Refused(
            f"forward's record has {len(program.inputs)} input tensors; the task makes {len(inputs)}"
        )
    for i, (t, d) in enumerate(zip(inputs, program.inputs, strict=True)):
        if DTYPES.get(d.dtype) != t.dtype:
            raise Refused(f"forward's record has input {i} as {d.dtype}; the task makes {t.dtype}")
    kernels = kernelsource.build(program.kernels)
    device = inputs[0].device if inputs else torch.device("cpu")
    memory = FreshMemory(program, inputs, kept, device)
    return Runner(program, memory, kernels, allowed).run()


RECORDED_BYTES = 4 << 30
"""The most memory `recorded_launches` allocates for a record's storages."""


def recorded_launches(program: Program) -> list[Any]:
    """Each launch of `program` as a `records.LaunchRecord` (what `checks.aot` compiles), with its
    kernel rebuilt from its source and its arguments laid out as the trial had them (dtypes,
    sizes, strides, the alignment their offsets give, the scalars and constexprs it passed). No
    kernel runs; the storages are CPU memory of the recorded sizes."""
    from kernelcraft.engine.replay import kernelsource
    from kernelcraft.engine.watch.records import make_record
    from kernelcraft.engine.wire.tensors import DTYPES

    total = sum(d.nbytes for d in program.storages)
    if total > RECORDED_BYTES:
        raise Refused(
            f"forward's record names {total} bytes of storages, over the {RECORDED_BYTES} allowed here"
        )
    kernels = kernelsource.build(program.kernels)
    inputs = []
    for d in program.inputs:
        dtype = DTYPES.get(d.dtype)
        if dtype is None:
            raise Refused(f"forward's record names the dtype {d.dtype!r}")
        inputs.append(torch.zeros(d.shape, dtype=dtype))
    kept = [
        torch.zeros(d.nbytes, dtype=torch.uint8)
        for d in sorted((d for d in program.storages if d.kind == "kept"), key=lambda d: d.index)
    ]
    runner = Runner(program, FreshMemory(program, inputs, kept, torch.device("cpu")), kernels, None)
    records = []
    for step in program.steps:
        if isinstance(step, LaunchStep):
            kernel, args, kwargs, grid = runner.launch_args(step)
            records.append(make_record(kernel, tuple(args), kwargs, grid))
    return records
