"""The replay check: forward's output must be what the harness saw forward do.

The op recorder (guard.py) and the knockout (knockout.py) watch forward from inside the
candidate's own process, and a candidate can hide from both: it can compute in numpy, run PyTorch
with the Python dispatch key excluded (`torch._C._DisableTorchDispatch`), or read a kernel's
result on the host to tell a knocked-out run from a real one. Whatever the dodge, the right answer
then arrives by a path the harness did not record.

So while forward runs, `Tape` records what the harness can see it do, in order: every PyTorch op
outside a Triton launch (with the layout of each tensor it read and wrote) and every Triton
launch that ran (the tuned one, not the autotuner's benchmarking runs). Afterwards, with no
candidate Python running, `Tape.replay` does it all again on fresh memory: the inputs put back as
they were before forward, the tensors kept on the model (buffers, attributes, the candidate's
module globals) put back likewise, and every other tensor, whatever made it, a buffer of 0xFF bytes
(NaN in every float dtype). Ops run again; launches run again through Triton's own `run`, with the
grid and arguments they had. The outputs must come out as forward returned them. A tensor that no
recorded op made (`torch.from_numpy`, PyTorch run out of the recorder's sight) is garbage in the
replay, so whatever it fed is wrong: the candidate fails as `forbidden_construct`, with the
tensors the harness could not account for named.

Random ops replay with the generator state they had. A tensor forward makes from host values
(`torch.tensor(...)`, `torch.from_numpy`) is unaccounted for, however small: a host value may be a
whole result computed in numpy (a loss is one number). Constants belong in `__init__` (a buffer) or
in a kernel's scalar arguments. Parameters are not copied: forward must not change them (a
fingerprint is compared). The replay never writes a storage forward left behind: it works on
copies, fresh buffers it frees after their last use, and compares its outputs with forward's a
chunk at a time, so it needs about one more copy of the inputs and of forward's working set.
Memory running out in the replay is the harness's limit, not the candidate's doing: `replay`
raises `ReplayOutOfMemory` (the worker reports it as a harness limit, with the figures).

Written by the evaluation engine only.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from kernelcraft.base.failures import is_out_of_memory
from kernelcraft.engine.replay import storage, traced  # noqa: F401 - traced: loaded before the guard's snapshot
from kernelcraft.engine.replay.descriptors import Desc, descriptor, descriptor_type, rounds_to_tf32


class ReplayOutOfMemory(Exception):
    """The replay ran out of memory: a limit of the harness's (its message: torch's, with figures)."""


# Ops whose output holds values that came from the host, not from their tensor arguments.
_FROM_HOST = frozenset({"lift_fresh", "lift_fresh_copy"})
# Ops with nothing to do in a replay: host reads, size queries, stream bookkeeping.
_NOTHING_TO_REPLAY = frozenset(
    {
        "_local_scalar_dense",
        "is_nonzero",
        "sym_size",
        "sym_stride",
        "sym_numel",
        "sym_storage_offset",
        "record_stream",
    }
)
# Ops that read a value back to the host: what forward's host code does next may depend on it.
_HOST_READS = frozenset({"_local_scalar_dense", "is_nonzero"})
_ALLOCATIONS = frozenset(
    {"empty", "empty_like", "empty_strided", "empty_permuted", "new_empty", "new_empty_strided"}
)
# Ops that change a tensor's metadata (its view of a storage), never the storage's bytes.
_METADATA = frozenset(
    {"set_", "resize_", "as_strided_", "transpose_", "t_", "squeeze_", "unsqueeze_", "detach_"}
)
REL_TOLERANCE = 1e-2  # a replay runs the same kernels on the same data; atomics may reorder sums


@dataclass(frozen=True)
class Ref:
    """A tensor as an op or launch saw it: which storage (key, generation), and its view of it."""

    key: tuple[str, int]  # (device, storage data_ptr)
    gen: int
    offset: int
    size: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype
    device: torch.device
    nbytes: int  # of the view's extent

    @property
    def storage_id(self) -> tuple[tuple[str, int], int]:
        return self.key, self.gen


@dataclass
class _Op:
    func: Any
    name: str
    args: Any
    kwargs: Any
    outs: list[Ref]
    created: list[int]  # indices of the outputs in storages this op made
    rng_state: Any = None
    value: Any = None  # a host read's result (`.item()`, `bool(t)`): what forward's host code got


@dataclass
class _Launch:
    run: Any  # Triton's own run method (JITFunction.run or InterpretedFunction.run)
    fn: Any
    args: Any
    kwargs: Any
    grid: tuple[int, ...]
    benchmark: bool = False


@dataclass
class Unexplained:
    """A tensor forward used that the replay could not account for."""

    where: str
    ref: Ref


@dataclass
class Tape:
    """What forward did, as the harness saw it. Fill it with `op` (from a dispatch mode) and
    `launch` (from the launch interceptor), then `replay`."""

    kept: dict[tuple[str, int], torch.Tensor] = field(default_factory=dict)
    """Storages that existed before forward and are put back before the replay: key -> a tensor
    holding the whole storage (the real one)."""
    _saved: dict[tuple[str, int], torch.Tensor] = field(default_factory=dict)
    """Copies, taken before forward, of kept storages other than the inputs and parameters."""
    _pristine: dict[tuple[str, int], torch.Tensor] = field(default_factory=dict)
    """The inputs' untouched originals (the worker's), by the key of the input forward got."""
    _params: dict[tuple[str, int], tuple[str, tuple[int, int, bytes]]] = field(default_factory=dict)
    entries: list[_Op | _Launch] = field(default_factory=list)
    _gen: dict[tuple[str, int], int] = field(default_factory=dict)
    _created: set[tuple[tuple[str, int], int]] = field(default_factory=set)
    _sizes: dict[tuple[tuple[str, int], int], int] = field(default_factory=dict)
    input_index: dict[tuple[str, int], int] = field(default_factory=dict)
    """Each input's storage key -> its place among the inputs (`program.py` names inputs so)."""
    input_order: list[torch.Tensor] = field(default_factory=list)
    reads: int = 0
    """Host reads so far (`.item()`, `bool(t)`): the k-th is `("read", k)` in `derived`."""
    last_read: Any = None
    derived: list[tuple[Any, Any]] = field(default_factory=list)
    """Numbers forward's host code computed from its reads (`traced.py`): (value, expression)."""
    tracing: bool = False
    """Forward's recorded run is on (`traced.ReadTracer`): arithmetic on its reads is traced."""

    # ----------------------------------------------------------------------------------------
    # Before forward

    def keep(
        self, inputs: list[torch.Tensor], pristine: list[torch.Tensor], model: Any, scopes: Iterable[Any]
    ) -> None:
        """Take the storages forward may start from, before it runs: the inputs (the replay starts
        from a copy of `pristine`, their untouched originals, in the same order), the model's
        parameters (fingerprinted: forward must not change them) and every other tensor reachable
        from the model or from `scopes` (the candidate's module globals), copied now."""
        for i, (t, p) in enumerate(zip(inputs, pristine, strict=True)):
            self.kept[storage.key(t)] = t
            self._pristine[storage.key(t)] = p
            self.input_index.setdefault(storage.key(t), i)
            self.input_order.append(t)
        params = dict(model.named_parameters()) if isinstance(model, torch.nn.Module) else {}
        for name, p in params.items():
            k = storage.key(p)
            if k not in self.kept:
                self.kept[k] = p
                self._params[k] = (name, storage.fingerprint(p))
        for t in storage.reachable([model, *scopes]):
            k = storage.key(t)
            if k not in self.kept and t.untyped_storage().nbytes() > 0:
                self.kept[k] = t
                self._saved[k] = storage.whole(t).clone()

    # ----------------------------------------------------------------------------------------
    # During forward

    def op(self, func: Any, name: str, args: Any, kwargs: Any, run: Callable[[], Any]) -> Any:
        """Record one PyTorch op and run it (`run`): what it read, before; what it made, after."""
        rng = _rng_state(func)
        read = {storage.key(t) for t in _tensors((args, kwargs))}
        frozen_args, frozen_kwargs = self._freeze(args), self._freeze(kwargs)
        out = run()
        made = list(_tensors(out))
        if name in _FROM_HOST:  # values from the host (torch.tensor, from_numpy): not accounted for
            outs = [self._ref(t) for t in made]
            self.entries.append(_Op(func, name, frozen_args, frozen_kwargs, outs, [], rng))
            return out
        created = []
        for i, t in enumerate(made):
            k = storage.key(t)
            if k not in read and k not in self.kept:
                self._gen[k] = self._gen.get(k, -1) + 1
                self._created.add((k, self._gen[k]))
                self._sizes[(k, self._gen[k])] = t.untyped_storage().nbytes()
                created.append(i)
        outs = [self._ref(t) for t in made]
        value = out if name in _HOST_READS and isinstance(out, (bool, int, float)) else None
        self.entries.append(_Op(func, name, frozen_args, frozen_kwargs, outs, created, rng, value))
        if name in _HOST_READS:
            self.reads += 1
            self.last_read = value
        return out

    def derive(self, value: Any, expr: Any) -> None:
        """A number forward's host code computed from its reads (`traced.py`)."""
        self.derived.append((value, expr))

    def launch(self, run: Any, fn: Any, args: Any, kwargs: Any, grid: tuple[int, ...]) -> None:
        """Record one Triton launch, before it runs."""
        self.entries.append(_Launch(run, fn, self._freeze(args), self._freeze(kwargs), tuple(grid)))

    def mark(self) -> int:
        return len(self.entries)

    def keep_last_launch(self, since: int) -> None:
        """An autotuner ran between `mark()` (= since) and now: its benchmarking launches are not
        forward's; the last launch is the one it chose."""
        launches = [e for e in self.entries[since:] if isinstance(e, _Launch)]
        for e in launches[:-1]:
            e.benchmark = True

    # ----------------------------------------------------------------------------------------
    # After forward

    def replay(self, outputs: list[torch.Tensor], sync: Callable[[], None]) -> str | None:
        """Run the tape again from the state before forward; None when it reproduces `outputs`,
        else why not (the verdict's message). The kept storages end as forward left them."""
        out_refs = [self._ref(t) for t in outputs]
        for k, (name, before) in self._params.items():
            if storage.fingerprint(self.kept[k]) != before:
                return f"forward changed the parameter {name!r}; a forward must leave its parameters alone"
        unexplained = self.unexplained(out_refs)
        rng = _rng_state(None)
        error = None
        try:
            got = self._run(out_refs, sync)
            bad = [i for i, (g, e) in enumerate(zip(got, outputs, strict=True)) if not _same(g, e)]
        except Exception as e:  # noqa: BLE001 - what the replay of a candidate's forward raises is its failure
            if isinstance(e, (torch.OutOfMemoryError, MemoryError)) or is_out_of_memory(str(e)):
                raise ReplayOutOfMemory(f"{type(e).__name__}: {str(e)[:600]}") from e
            error, bad = f"{type(e).__name__}: {e}", list(range(len(outputs)))
        finally:
            _rng(rng).__enter__()
        if not bad:
            return None
        which = ", ".join(f"output {i}" for i in bad)
        if unexplained:
            names = "; ".join(f"{u.where}: {_describe(u.ref)}" for u in unexplained[:3])
            return (
                f"{which} did not come out of replaying forward's recorded Triton launches and PyTorch "
                f"ops, and forward used tensors no recorded op made ({names}). Compute with Triton "
                "kernels on tensors PyTorch allocates (no numpy, torch.from_numpy or dispatch tricks); "
                "make constant tensors in __init__ (a buffer) or pass Python scalars to the kernel; keep "
                "tensors made ahead of time on ModelNew or in module globals"
            )
        if error is not None:
            return (
                f"forward could not be replayed from its recorded Triton launches and PyTorch ops "
                f"({error}): its result depends on something the harness did not see it do"
            )
        return (
            f"{which} did not come out of replaying forward's recorded Triton launches and PyTorch ops "
            "from the inputs: part of the result was computed out of the harness's sight (numpy, "
            "PyTorch with its dispatch disabled, host code that behaves differently per call)"
        )

    def _run(self, out_refs: list[Ref], sync: Callable[[], None]) -> list[torch.Tensor]:
        """The replay itself: the outputs' views of its memory. A fresh storage is freed after
        the last step that uses it."""
        memory = _Memory(self)
        steps = [e for e in self.entries if not (isinstance(e, _Launch) and e.benchmark)]
        last: dict[tuple[tuple[str, int], int], int] = {}
        for i, entry in enumerate(steps):
            for ref in _refs((entry.args, entry.kwargs, getattr(entry, "outs", ()))):
                last[ref.storage_id] = i
        for ref in out_refs:
            last[ref.storage_id] = len(steps)
        with torch.no_grad():
            for i, entry in enumerate(steps):
                if isinstance(entry, _Launch):
                    args, kwargs = memory.views(entry.args), memory.views(entry.kwargs)
                    entry.run(entry.fn, *args, grid=entry.grid, warmup=False, **kwargs)
                else:
                    _replay_op(entry, memory)
                for sid in [s for s in memory.fresh if last.get(s, -1) <= i]:
                    del memory.fresh[sid]
            sync()
            return [memory.view(r) for r in out_refs]

    def unexplained(self, out_refs: list[Ref]) -> list[Unexplained]:
        """Tensors forward used (or returned) whose storage neither existed on the model or the
        inputs before forward nor was made by a recorded op."""
        found: dict[tuple[tuple[str, int], int], Unexplained] = {}
        for i, entry in enumerate(self.entries):
            if isinstance(entry, _Launch) and entry.benchmark:
                continue
            if isinstance(entry, _Op) and entry.name in _FROM_HOST:
                continue  # its argument is its output, accounted for (or not) there
            what = f"launch {_name(entry.fn)}" if isinstance(entry, _Launch) else f"aten.{entry.name}"
            for ref in _refs((entry.args, entry.kwargs)):
                if not self._accounted(ref):
                    found.setdefault(ref.storage_id, Unexplained(f"{what} (step {i + 1})", ref))
        for i, ref in enumerate(out_refs):
            if not self._accounted(ref):
                found.setdefault(ref.storage_id, Unexplained(f"output {i}", ref))
        return list(found.values())

    def _accounted(self, ref: Ref) -> bool:
        return ref.nbytes == 0 or ref.key in self.kept or ref.storage_id in self._created

    def _ref(self, t: torch.Tensor) -> Ref:
        k = storage.key(t)
        gen = self._gen.get(k, 0)
        extent = storage.extent(t)
        sid = (k, gen)
        if sid not in self._created and k not in self.kept:
            self._sizes[sid] = max(self._sizes.get(sid, 0), t.untyped_storage().nbytes(), extent)
        return Ref(
            k, gen, int(t.storage_offset()), tuple(t.shape), tuple(t.stride()), t.dtype, t.device, extent
        )

    def _freeze(self, obj: Any) -> Any:
        if isinstance(obj, torch.Tensor):
            return self._ref(obj)
        if type(obj) is descriptor_type() and isinstance(obj.base, torch.Tensor):
            return Desc(
                self._ref(obj.base),
                tuple(int(x) for x in obj.shape),
                tuple(int(x) for x in obj.strides),
                tuple(int(x) for x in obj.block_shape),
                str(obj.padding),
                rounds_to_tf32(obj),
            )
        if isinstance(obj, (list, tuple)):
            items = [self._freeze(x) for x in obj]
            return tuple(items) if isinstance(obj, tuple) else items
        if isinstance(obj, dict):
            return {k: self._freeze(v) for k, v in obj.items()}
        return obj


class _Memory:
    """The replay's storages: the kept ones (real), every other one fresh and full of 0xFF."""

    def __init__(self, tape: Tape) -> None:
        self.tape = tape
        self.fresh: dict[tuple[tuple[str, int], int], torch.Tensor] = {}
        self.inputs: dict[tuple[str, int], torch.Tensor] = {}

    def storage(self, ref: Ref) -> torch.UntypedStorage:
        tape = self.tape
        if ref.key in tape.kept:  # forward's own storage is never written: the replay uses copies
            if ref.key in tape._saved:
                return tape._saved[ref.key].untyped_storage()
            if ref.key in tape._pristine:
                if ref.key not in self.inputs:
                    self.inputs[ref.key] = storage.whole(tape._pristine[ref.key]).clone()
                return self.inputs[ref.key].untyped_storage()
            return tape.kept[ref.key].untyped_storage()  # a parameter (fingerprinted)
        buf = self.fresh.get(ref.storage_id)
        if buf is None:
            size = max(self.tape._sizes.get(ref.storage_id, 0), ref.nbytes, 1)
            buf = self.fresh[ref.storage_id] = torch.full((size,), 255, dtype=torch.uint8, device=ref.device)
        return buf.untyped_storage()

    def view(self, ref: Ref) -> torch.Tensor:
        t = torch.empty(0, dtype=ref.dtype, device=ref.device)
        return t.set_(self.storage(ref), ref.offset, ref.size, ref.stride)

    def views(self, obj: Any) -> Any:
        if isinstance(obj, Ref):
            return self.view(obj)
        if isinstance(obj, Desc):
            return descriptor(self.view(obj.base), obj)
        if isinstance(obj, (list, tuple)):
            items = [self.views(x) for x in obj]
            return tuple(items) if isinstance(obj, tuple) else items
        if isinstance(obj, dict):
            return {k: self.views(v) for k, v in obj.items()}
        return obj


def _replay_op(op: _Op, memory: _Memory) -> None:
    if op.name in _NOTHING_TO_REPLAY or op.name in _ALLOCATIONS or op.name in _METADATA:
        return
    if op.name in _FROM_HOST:
        return
    mutable = op.func._schema.is_mutable
    if not op.created and not mutable:
        return  # a view: no bytes of its own
    with _rng(op.rng_state):
        result = op.func(*memory.views(op.args), **memory.views(op.kwargs))
    made = list(_tensors(result))
    for i in op.created:  # out of place: its result into the replay's storage for that output
        if i < len(made):
            memory.view(op.outs[i]).copy_(made[i])


# --------------------------------------------------------------------------------------------
# Helpers


def _tensors(obj: Any) -> Iterator[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for x in obj:
            yield from _tensors(x)
    elif isinstance(obj, dict):
        for x in obj.values():
            yield from _tensors(x)


def _refs(obj: Any) -> Iterator[Ref]:
    if isinstance(obj, Ref):
        yield obj
    elif isinstance(obj, Desc):
        yield obj.base
    elif isinstance(obj, (list, tuple)):
        for x in obj:
            yield from _refs(x)
    elif isinstance(obj, dict):
        for x in obj.values():
            yield from _refs(x)


def _rng_state(func: Any) -> Any:
    """The generators' state before a random op (None for any other op); `func=None`: always."""
    schema = getattr(func, "_schema", None)
    if func is not None and (schema is None or not any("Generator" in str(a.type) for a in schema.arguments)):
        return None
    return torch.random.get_rng_state(), (
        torch.cuda.get_rng_state() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    )


class _rng:
    def __init__(self, state: Any) -> None:
        self.state = state

    def __enter__(self) -> None:
        if self.state is not None:
            cpu, cuda = self.state
            torch.random.set_rng_state(cpu)
            if cuda is not None:
                torch.cuda.set_rng_state(cuda)

    def __exit__(self, *exc: Any) -> None:
        return None


def _same(got: torch.Tensor, expected: torch.Tensor, chunk: int = 1 << 24) -> bool:
    """Whether the replay's output matches forward's, compared a chunk at a time (outputs of
    several GiB must not need several more)."""
    if got.shape != expected.shape or got.dtype != expected.dtype:
        return False
    if expected.numel() == 0:
        return True
    a, b = got.reshape(-1), expected.reshape(-1)
    exact = not (expected.is_floating_point() or expected.is_complex())
    scale = 0.0
    if not exact:
        for i in range(0, b.numel(), chunk):
            part = b[i : i + chunk]
            scale = max(scale, float(torch.nan_to_num(part.abs(), nan=0.0, posinf=0.0).max()))
    atol = REL_TOLERANCE * max(scale, 1e-30)
    for i in range(0, b.numel(), chunk):
        x, y = a[i : i + chunk], b[i : i + chunk]
        if exact:
            if not torch.equal(x, y):
                return False
        elif not bool(torch.isclose(x, y, rtol=REL_TOLERANCE, atol=atol, equal_nan=True).all()):
            return False
    return True


def _name(fn: Any) -> str:
    inner = getattr(fn, "fn", fn)
    return getattr(inner, "__name__", type(fn).__name__)


def _describe(ref: Ref) -> str:
    return f"{ref.dtype} tensor of shape {list(ref.size)} on {ref.device}"


def candidate_scopes() -> list[Any]:
    """The candidate's module globals (where a kernel may keep tensors it made ahead of time)."""
    from kernelcraft.base.errortext import CANDIDATE_MODULE

    mod = sys.modules.get(CANDIDATE_MODULE)
    return [vars(mod)] if mod is not None else []
