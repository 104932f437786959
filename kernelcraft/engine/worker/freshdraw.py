"""The reference's side of one fresh draw of the fresh-input replay (`replay/fresh.py`): new inputs
from a secret seed, the candidate's record re-run on them (on the CPU in a child forked for it,
`replay/untouched.py`), Model's answer, the comparison. Runs in the reference worker only.
"""

from __future__ import annotations

from typing import Any

from kernelcraft.engine.checks.compare import compare_outputs
from kernelcraft.engine.replay import fresh, kernelsource, untouched
from kernelcraft.engine.wire.protocol import Replayed
from kernelcraft.engine.worker.common import error_line


def fresh_draw(
    worker: Any,
    program: Any,
    kept: list[Any],
    input_set: int,
    scale: float | None,
    seed: int,
    allowed: Any,
    refused: Any,
) -> Replayed:
    """One fresh draw of the inputs (scaled as the trial's were), the record re-run on it,
    compared with Model's outputs."""

    assert worker.job is not None
    torch = worker.torch
    cuda = worker.device.startswith("cuda")
    # On the CPU the record's kernels run in a child forked before Model's answer exists (`untouched.py`)
    inputs, expected = worker.expected(input_set, seed, scale, answer=cuda)
    expected = None if expected is None else worker._map(expected, lambda t: t.detach().to("cpu", copy=True))
    leaves = [
        torch.empty_like(x, memory_format=torch.contiguous_format).copy_(x)
        for x in worker.tensors.leaves(inputs)
        if isinstance(x, torch.Tensor)
    ]
    why, note = fresh.input_shapes(program, worker.made_shapes.get(input_set, []), worker.shapes(leaves))
    if why is not None or note is not None:
        return refused(why) if why is not None else Replayed(note=note)

    def rerun() -> list[Any]:
        got = list(fresh.run_program(program, leaves, [k.clone() for k in kept], allowed))
        worker.sync()
        return got

    refusals = (fresh.Refused, kernelsource.KernelRefused)
    try:
        got = rerun() if cuda else untouched.run_apart(rerun, refusals, untouched.cap(worker.ref_out))
    except (*refusals, untouched.Apart) as e:
        kind = getattr(e, "kind", "refused")
        return refused(str(e) if kind == "refused" else untouched.words(str(e), kind == "raised"))
    except Exception as e:  # noqa: BLE001 - what the candidate's record raises is its verdict
        return refused(untouched.words(error_line(e), True))
    expected = untouched.answer(worker, inputs) if expected is None else expected
    reference = worker._map(worker.tensors.leaves(expected), lambda t: t.to(worker.device))
    verdict = compare_outputs(reference, list(got), worker.job.correctness)
    if verdict is None:
        return Replayed()
    _cls, ev = verdict
    return refused(
        "forward's recorded Triton launches and PyTorch ops, re-run on fresh inputs the candidate never "
        f"saw (kernels rebuilt from their source, where no candidate Python runs), gave a wrong answer ({ev.message}): "
        "part of forward's answer came from its host code (a scalar or fill value computed from the "
        "inputs in Python or numpy), not from its kernels. Compute the answer in Triton kernels; hand "
        "kernels only sizes, strides, constants and values read back from their own outputs"
        + (fresh.READS_HINT if fresh.reads_back(program) else ""),
        output_index=ev.output_index,
    )
