"""Measuring a task without allocating it, in the reference worker (trusted; the task is loaded).

`measure(task, interpret)` builds the trial's inputs (`get_cpu_inputs()` in the interpreter when
the task has it, else `get_inputs()`) and `Model(*get_init_inputs())` under `torch.device("meta")`
(shapes and dtypes, no memory, no compute) and runs forward there for the outputs' sizes (when an
op has no meta kernel, the outputs are left unmeasured and `memory.py` takes them as large as the
inputs). Forward on meta runs torch's Python decompositions, whose first call imports torch._dynamo
(~1 s, 3.2 s without bytecode on the H200): where it is not imported yet (a one-off command's
workers) and the task is small (`QUICK_BELOW_BYTES`), its outputs are left unmeasured instead, as
a job alone on the device loses nothing by it. `device_memory(device)` is what the device has free
and in all. `shrink_for_interpreter` loads the task at small sizes (`source/shrink.py`) when the
interpreter would take too long at its own; `shrink_keeping` keeps the sizes multiples of what
the candidate's kernels divide them by (`multiples.Multiples`), within `MULTIPLES_MAX_ELEMENTS`.

Runs in the worker process only.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from kernelcraft.engine.measure.rotation import nbytes
from kernelcraft.engine.source import shrink
from kernelcraft.engine.source.multiples import Multiples

QUICK_BELOW_BYTES = 256 << 20
"""A task whose inputs and parameters are under this (and, in the interpreter, under
`shrink.SHRINK_ABOVE_ELEMENTS` elements) is measured without forward where that would import
torch._dynamo (`measure(quick=)`)."""


def _tensors(obj: Any, torch: Any) -> list[Any]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for x in obj for t in _tensors(x, torch)]
    if isinstance(obj, dict):
        return [t for x in obj.values() for t in _tensors(x, torch)]
    return []


def shape_text(ts: list[Any]) -> str:
    return ", ".join(f"{str(t.dtype).removeprefix('torch.')}{list(t.shape)}" for t in ts)


def measure(task: Any, interpret: bool, quick: bool = False) -> dict[str, Any]:
    """The task's sizes on the meta device: bytes of inputs, params (and buffers) and outputs,
    the element count of inputs and params (the interpreter's work), the inputs' shapes.
    `quick`: a small task's outputs are not measured where that would import torch._dynamo."""
    import sys

    import torch

    torch.manual_seed(0)
    with torch.device("meta"):
        fn = getattr(task, "get_cpu_inputs", None) if interpret else None
        inputs = list((fn or task.get_inputs)())
        model = task.Model(*task.get_init_inputs())
    ins = _tensors(inputs, torch)
    params = [*model.parameters(), *model.buffers()] if isinstance(model, torch.nn.Module) else []
    elements = sum(t.numel() for t in ins) + sum(t.numel() for t in params)
    # (In the interpreter a task over SHRINK_ABOVE_ELEMENTS is shrunk, which needs its outputs.)
    shrinks = interpret and elements > shrink.SHRINK_ABOVE_ELEMENTS
    small = nbytes(ins) + nbytes(params) < QUICK_BELOW_BYTES and not shrinks
    outputs_measured, out_bytes = False, nbytes(ins)
    if not (quick and small and "torch._dynamo" not in sys.modules):
        try:
            with torch.no_grad():
                outs = _tensors(model(*inputs), torch)
            outputs_measured, out_bytes = True, nbytes(outs)
        except Exception:
            pass
    # The other input sets are trials too: their inputs and outputs travel in the same frames
    # (wire/bounds.py) and live in the same memory, so the figures are the largest set's.
    in_bytes, out_bytes = _largest_set(task, model, interpret, nbytes(ins), out_bytes, outputs_measured)
    return {
        "inputs": in_bytes,
        "params": nbytes(params),
        "outputs": out_bytes,
        "outputs_measured": outputs_measured,
        "elements": elements,
        "shapes": shape_text(ins)[:500],
        "dims": [list(t.shape) for t in ins][:16],
    }


def _largest_set(
    task: Any, model: Any, interpret: bool, in_bytes: int, out_bytes: int, outputs_measured: bool
) -> tuple[int, int]:
    """(inputs, outputs) bytes of the largest of the task's other input sets (`get_input_sets`,
    or `get_cpu_input_sets` in the interpreter), at least the first set's, on the meta device.
    A set whose outputs cannot be measured counts its inputs' bytes for them, as the first does."""
    import torch

    fn = getattr(task, "get_cpu_input_sets", None) if interpret else None
    fn = fn or getattr(task, "get_input_sets", None)
    if fn is None:
        return in_bytes, out_bytes
    try:
        with torch.device("meta"):
            sets = [list(s) for s in fn()]
    except Exception:  # the trials run the sets and say what is wrong with them
        return in_bytes, out_bytes
    for inputs in sets:
        ins = _tensors(inputs, torch)
        in_bytes = max(in_bytes, nbytes(ins))
        outs_bytes = nbytes(ins)
        if outputs_measured:
            try:
                with torch.no_grad(), torch.device("meta"):
                    outs_bytes = nbytes(_tensors(model(*inputs), torch))
            except Exception:
                pass
        out_bytes = max(out_bytes, outs_bytes)
    return in_bytes, out_bytes


def device_memory(device: str) -> tuple[int, int]:
    """(free, total) bytes of the device: the GPU's, or the machine's RAM (MemAvailable)."""
    if device.startswith("cuda"):
        import torch

        free, total = torch.cuda.mem_get_info()
        return int(free), int(total)
    try:
        text = Path("/proc/meminfo").read_text()
    except OSError:
        return 0, 0
    kib = {m[1]: int(m[2]) for m in re.finditer(r"^(\w+):\s+(\d+) kB", text, re.MULTILINE)}
    return kib.get("MemAvailable", 0) * 1024, kib.get("MemTotal", 0) * 1024


@dataclass
class Shrunk:
    """What the trials run on in the interpreter (`shrink_for_interpreter`)."""

    task: Any
    sizes: dict[str, Any]
    source: str | None = None
    """The shrunk source, or None: the task runs at its own sizes."""
    changes: dict[str, list[int]] = field(default_factory=dict)
    """{constant: [old, new]}."""
    not_shrunk: str | None = None
    """Why a task over the limit was left at its own sizes."""
    probe: str | None = None
    """What the probe of the reference's output found (`depends_on_inputs`), when the verdict
    must say it: why larger sizes were chosen, or that the trials cannot tell a kernel from one
    that ignores its inputs (`INPUTS_IGNORED`)."""
    multiples: Literal["kept", "dropped"] | None = None
    """What became of the candidate's divisors (`multiples.Multiples`) in a shrunk plan: "kept",
    or "dropped" (no plan that keeps them fits `MULTIPLES_MAX_ELEMENTS`; `dropped` says why)."""
    dropped: str = ""


PROBE_MAX_ELEMENTS = 1 << 23
"""The largest work (elements of inputs and parameters) at which the reference is run to find
sizes where its output depends on its inputs, when the shrunk sizes gave none."""

INPUTS_IGNORED = (
    "warning: at the trials' sizes ({sizes}) the reference's output does not depend on its inputs "
    "(two draws of get_inputs() gave the same output), so this verdict cannot tell a kernel from one "
    "that ignores its inputs; {why}; run --full-size, or on a GPU, to check it"
)


MULTIPLES_MAX_ELEMENTS = 1 << 21
"""The most work (elements of inputs and parameters) a plan that keeps the candidate's divisors
may take: twice `shrink.SHRINK_ABOVE_ELEMENTS`. The issue's rows kept at 1024 x 2048 (2M) took
a verify stage of 43 s for two trials on the loaded 2-core machine, against a job's default
120 s for five; more would run out of time where the plain shrink gives a verdict. Over it, the
task shrinks as for any candidate and the verdict warns (`Shrunk.multiples` "dropped")."""


def shrink_keeping(
    source: str,
    task: Any,
    sizes: dict[str, Any],
    load: Any,
    multiples: Multiples,
    mode: str = "train",
    rule: str = "kernelcraft",
) -> Shrunk:
    """`shrink_for_interpreter`, each shrunk size kept a multiple of what the candidate's kernels
    divide it by (`multiples`, `source/divisors.py`): first of the divisors that divided that
    size; where an extent of an input (a product of adjacent dimensions: an element count) that
    one divided no longer is, again with `products` (`multiples.Multiples`). A plan
    over `MULTIPLES_MAX_ELEMENTS`, or none where the task without them shrinks, gives way to
    the shrink without them, "dropped" and why in `multiples`."""
    plain = lambda: shrink_for_interpreter(source, task, sizes, load, mode, rule)  # noqa: E731
    if not multiples:
        return plain()
    plan = shrink_for_interpreter(source, task, sizes, load, mode, rule, multiples)
    if plan.source is None and multiples.untiled and not multiples.flat:
        # two equal sizes, one untiled, may not part (an image's height and width): all kept
        multiples = dataclasses.replace(multiples, untiled=frozenset())
        plan = shrink_for_interpreter(source, task, sizes, load, mode, rule, multiples)
    broken = plan.source is not None and multiples.broken(sizes["dims"], plan.sizes["dims"], plan.changes)
    if broken and multiples.flat:
        plan, broken = _doubled(source, plan, sizes["dims"], load, multiples)
    elif broken:
        products = dataclasses.replace(multiples, products=True)
        plan = shrink_for_interpreter(source, task, sizes, load, mode, rule, products)
        if plan.source is not None:
            broken = products.broken(sizes["dims"], plan.sizes["dims"], plan.changes)
    if plan.source is None and sizes["elements"] <= MULTIPLES_MAX_ELEMENTS:
        return plan  # not shrunk, or shrunk only as far as the task's own sizes allow
    work = int(plan.sizes["elements"])
    if plan.source is not None and work <= MULTIPLES_MAX_ELEMENTS and not broken:
        plan.multiples = "kept"
        return plan
    other = plain()
    if other.source is None:
        return plan  # the task's own sizes either way: nothing to drop
    other.multiples = "dropped"
    other.dropped = (
        f"no plan keeps them all ({broken})"
        if broken
        else f"the smallest plan that keeps them has {work:.3g} elements of work"
    )
    return other


def _doubled(
    source: str, plan: Shrunk, dims: list[list[int]], load: Any, multiples: Multiples
) -> tuple[Shrunk, str | None]:
    """For a candidate that reads its inputs as flat buffers (`multiples.flat`): `plan` with its
    shrunk sizes of the inputs' own doubled together (each at most its size in the task, and
    still dividing it) until every input's element count a value divided (`dims`: the task's)
    is divided again, or the work passes `MULTIPLES_MAX_ELEMENTS`; and what is still broken."""
    old = {name: o for name, (o, _n) in plan.changes.items()}
    values = {name: n for name, (_o, n) in plan.changes.items()}
    broken = multiples.broken(dims, plan.sizes["dims"], plan.changes)
    for step in range(16):
        grown = {
            name: v * 2
            for name, v in values.items()
            if name in multiples.untiled and v * 2 <= old[name] and old[name] % (v * 2) == 0
        }
        if not grown:
            break
        values.update(grown)
        try:
            small, changes = shrink.given(source, values)
            small_task = load(small, f"doubled{step}")
            small_sizes = measure(small_task, interpret=True)
        except Exception:  # the task's own checks refuse these sizes: what was found stands
            break
        plan = Shrunk(small_task, small_sizes, small, {k: [o, n] for k, (o, n) in changes.items()})
        broken = multiples.broken(dims, plan.sizes["dims"], plan.changes)
        if not broken or plan.sizes["elements"] > MULTIPLES_MAX_ELEMENTS:
            break
    return plan, broken or None


def shrink_for_interpreter(
    source: str,
    task: Any,
    sizes: dict[str, Any],
    load: Any,
    mode: str = "train",
    rule: str = "kernelcraft",
    multiples: Multiples | None = None,
) -> Shrunk:
    """The task at sizes the interpreter runs in seconds, when it has no get_cpu_inputs and its
    work is over `shrink.SHRINK_ABOVE_ELEMENTS`: each smaller `shrink.LIMITS` in turn until the
    work is under it, or until forward stops running on meta at the smaller sizes (a convolution
    whose kernel outgrew its image). A limit whose rewrite would break the task's structure
    (`shrink.structure_broken`) is skipped. `load(source, tag)` imports a source.

    Then the reference runs on two draws of its inputs at the sizes found (`depends_on_inputs`):
    where its output is the same (GroupNorm with one channel a group outputs its bias), the
    trials could not tell a kernel from one that ignores its inputs, so the larger sizes tried,
    then the task's own, are probed in turn (up to `PROBE_MAX_ELEMENTS`) and the first whose
    output depends on the inputs is taken; when none does, the shrunk sizes stay and `probe`
    says the verdict cannot tell (`INPUTS_IGNORED`). `multiples`: what each shrunk size stays a
    multiple of (`shrink_keeping`); a plan over `MULTIPLES_MAX_ELEMENTS` is returned unprobed."""
    if hasattr(task, "get_cpu_inputs") or sizes["elements"] <= shrink.SHRINK_ABOVE_ELEMENTS:
        return Shrunk(task, sizes)
    best, tried, broken = _search(source, task, sizes, load, frozenset(), multiples)
    if best.source is None and broken:
        # A divisor between the model's sizes that may be incidental (level 2 #37: 64 groups
        # divide 1024 input features) is no reason to refuse: shrink the inputs' own sizes
        # (batch, sequence, image) and keep every size Model is built with.
        model = shrink.model_sizes(source)
        kept, tried, _ = _search(source, task, sizes, load, model, multiples)
        why = "shrinking its model's sizes would break its structure: " + "; ".join(broken[:4])
        if kept.source is None:
            best.not_shrunk = why
            return best
        best = kept
        best.probe = f"kept the model's own sizes ({', '.join(sorted(model))}): {why}"[:800]
    if best.source is None:
        return best
    if multiples and best.sizes["elements"] > MULTIPLES_MAX_ELEMENTS:
        return best  # over the divisors' budget: `shrink_keeping` takes another plan (no probe)
    if depends_on_inputs(best.task, mode, rule) is not False:
        return best
    at = ", ".join(f"{k} {o} -> {n}" for k, (o, n) in best.changes.items())
    larger = [s for s in tried if s.sizes["elements"] > best.sizes["elements"]]
    larger.append(Shrunk(task, sizes))
    for option in sorted(larger, key=lambda s: int(s.sizes["elements"])):
        if option.sizes["elements"] > PROBE_MAX_ELEMENTS:
            break
        if depends_on_inputs(option.task, mode, rule) is not False:
            why = f"at smaller sizes ({at}) the reference's output does not depend on its inputs"
            if option.source is None:
                option.not_shrunk = why
            else:
                option.probe = f"ran at larger sizes than the interpreter's limit: {why}"
            return option
    why = (
        f"nor did it at the larger sizes probed (work up to {PROBE_MAX_ELEMENTS:.3g} elements), and it "
        "may not at the task's own sizes either (a row's max minus its mean is zero at any size)"
    )
    best.probe = INPUTS_IGNORED.format(sizes=at, why=why)
    return best


def given_sizes(source: str, values: dict[str, int], load: Any) -> Shrunk:
    """The task at the sizes the user gave for the CPU (`shrink.given`), measured."""
    small, changes = shrink.given(source, values)
    task = load(small, "given")
    return Shrunk(task, measure(task, interpret=True), small, {k: [o, n] for k, (o, n) in changes.items()})


def _search(
    source: str,
    task: Any,
    sizes: dict[str, Any],
    load: Any,
    keep: frozenset[str],
    multiples: Multiples | None = None,
) -> tuple[Shrunk, list[Shrunk], list[str]]:
    """Each `shrink.LIMITS` in turn (the sizes named in `keep` left alone) until the work is
    under `shrink.SHRINK_ABOVE_ELEMENTS`: the smallest plan, every plan tried, and what the
    rewrites skipped for it would have broken. Where the task refuses a limit's sizes (its own
    checks, forward no longer running on meta), its model's sizes stay at the last limit it took
    and the inputs' own sizes (batch, sequence, image) go on shrinking alone."""
    best = Shrunk(task, sizes)
    tried: list[Shrunk] = []
    broken: list[str] = []
    done: dict[str, list[int]] = {}
    base, model = source, shrink.model_sizes(source)
    limits = list(shrink.LIMITS)
    while limits:
        limit = limits[0]
        small, changes, breaks = shrink.shrunk_source(base, limit, keep, multiples)
        broken = broken or breaks
        merged = {**done, **{k: [done.get(k, [o])[0], n] for k, (o, n) in changes.items()}}
        if tried and merged == tried[-1].changes:  # a floor the divisors set: the same plan again
            limits.pop(0)
            continue
        refused = False
        if changes:
            try:
                small_task = load(small, f"shrunk{limit}{len(tried)}")
                small_sizes = measure(small_task, interpret=True)
                refused = bool(sizes["outputs_measured"] and not small_sizes["outputs_measured"])
            except Exception:  # the task's own checks refuse these sizes (channels a group count divides)
                refused = True
        if refused:
            if keep >= model or not tried:
                break
            base, done, keep = str(tried[-1].source), tried[-1].changes, keep | model
            continue  # the same limit, the model's sizes where the task took them
        limits.pop(0)
        if not changes:  # every size within this limit (level 2's 128s under 256), or its
            continue  # structure broken at it: try smaller
        tried.append(Shrunk(small_task, small_sizes, small, merged))
        if small_sizes["elements"] < best.sizes["elements"]:
            best = tried[-1]
        if small_sizes["elements"] <= shrink.SHRINK_ABOVE_ELEMENTS:
            break
    return best, tried, broken


def depends_on_inputs(task: Any, mode: str = "train", rule: str = "kernelcraft") -> bool | None:
    """Whether `Model`'s output changes with its inputs by more than the trials' tolerance
    (`compare.py` under `rule`): `Model` built as the trials build it (seeded, its parameters
    perturbed unless the task opts out: `perturb.py`) runs on two draws of `get_inputs()` (seeds
    1 and 2, the RNG reset before each forward so that dropout draws alike); when the two outputs
    pass for each other, a kernel that ignores its inputs passes too. None when it cannot tell:
    forward failed, or the two draws gave equal inputs."""
    import random

    import numpy as np
    import torch

    from kernelcraft.engine.checks import perturb
    from kernelcraft.engine.checks.compare import compare_outputs

    try:
        torch.manual_seed(0)
        model = task.Model(*task.get_init_inputs())
        if isinstance(model, torch.nn.Module):
            if mode == "eval":
                model.eval()
            if perturb.task_allows(task):
                perturb.perturb(model, perturb.SALT)
        draws, outs = [], []
        for seed in (1, 2):
            torch.manual_seed(seed)
            random.seed(seed)
            np.random.seed(seed)
            inputs = list(task.get_inputs())
            draws.append(inputs)
            torch.manual_seed(0)
            with torch.no_grad():
                outs.append(model(*[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]))
    except Exception:
        return None
    if _same(draws[0], draws[1], torch):
        return None
    return compare_outputs(outs[0], outs[1], rule) is not None


def _same(a: Any, b: Any, torch: Any) -> bool:
    """Exactly equal (NaN equal to NaN), through lists, tuples and dicts."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return False
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if a.is_floating_point() or a.is_complex():
            return bool(((a == b) | (a.isnan() & b.isnan())).all())
        return bool(torch.equal(a, b))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y, torch) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k], torch) for k in a)
    try:
        return bool(a == b)
    except Exception:
        return False
