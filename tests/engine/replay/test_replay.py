"""The replay (replay.py): forward's recorded launches and ops, run again from the inputs with no
candidate code, must give forward's outputs. Each case runs the tape in a fresh interpreter
process (TRITON_INTERPRET must be set before Triton is imported)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

_SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    os.environ["TRITON_INTERPRET"] = "1"
    import numpy as np
    import torch, triton, triton.language as tl
    from kernelcraft.engine.watch import guard
    from kernelcraft.engine.replay import replay
    from kernelcraft.engine.watch.launches import intercept_launches

    @triton.jit
    def scale_kernel(x_ptr, y_ptr, n, s, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * s, mask=mask)

    def scale(x, s):
        y = torch.empty_like(x)
        scale_kernel[(triton.cdiv(x.numel(), 64),)](x, y, x.numel(), s, BLOCK=64)
        return y

    class Honest(torch.nn.Module):
        def forward(self, x):
            y = scale(x.contiguous().view(-1), 2.0).view(x.shape)
            z = torch.zeros_like(y)
            z.copy_(y)
            return scale(z.t().contiguous(), 0.5).t()

    class BufferConstant(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("k", torch.tensor([3.0]))
        def forward(self, x):
            return scale(x, float(self.k.item()))

    class HostScalar(torch.nn.Module):
        def forward(self, x):
            return scale(torch.tensor([[float(x.sum())]]), 1.0)

    class Workspace(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ws = torch.empty(0)
        def forward(self, x):
            if self.ws.numel() != x.numel():
                self.ws = torch.empty_like(x)
            scale_kernel[(triton.cdiv(x.numel(), 64),)](x, self.ws, x.numel(), 2.0, BLOCK=64)
            return scale(self.ws, 1.0)

    class NoDispatch(torch.nn.Module):
        def forward(self, x):
            y = scale(x, 1.0)
            with torch._C._DisableTorchDispatch():
                y.mul_(2.0)
            return y

    class FromNumpy(torch.nn.Module):
        def forward(self, x):
            host = torch.from_numpy(x.numpy() * 2.0)
            return scale(host, 1.0)

    class LargeHostTensor(torch.nn.Module):
        def forward(self, x):
            return scale(torch.tensor((x.numpy() * 2.0).tolist()), 1.0)

    class WritesParameter(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(4096))
        def forward(self, x):
            with torch._C._DisableTorchDispatch():
                self.w.data[: x.numel()].copy_(x.view(-1) * 2.0)
            return scale(self.w[: x.numel()].view(x.shape), 1.0)

    def run(model, x):
        tape = replay.Tape()
        tape.keep([x], [x.clone()], model, [])
        with torch.no_grad(), intercept_launches(execute=True, autotune="first", tape=tape), guard.OpRecorder(frozenset(), tape) as rec:
            out = model(x)
        expected = out.clone()
        why = tape.replay([out], lambda: None)
        assert torch.equal(out, expected), "the replay touched forward's output"
        return why

    x = torch.randn(8, 16)
    case = sys.argv[1]
    if case == "OutOfMemoryInTheReplay":  # forward ran; the replay's memory ran out
        def out_of_memory(*args, **kwargs):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 576.00 MiB")
        replay._replay_op = out_of_memory
        try:
            why = run(Honest(), x.clone())
        except replay.ReplayOutOfMemory as e:
            why = f"ReplayOutOfMemory: {e}"
    else:
        why = run(globals()[case](), x.clone())
    print(json.dumps({"why": why}))
    """
)


def _replay(case: str) -> str | None:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, case], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])["why"]


@pytest.mark.parametrize("case", ["Honest", "BufferConstant", "Workspace"])
def test_honest_forwards_replay_to_their_outputs(case: str) -> None:
    assert _replay(case) is None


def test_pytorch_with_dispatch_disabled_is_not_replayed() -> None:
    why = _replay("NoDispatch")
    assert why is not None and "out of the harness's sight" in why


@pytest.mark.parametrize(
    ("case", "shape"), [("FromNumpy", [8, 16]), ("LargeHostTensor", [8, 16]), ("HostScalar", [1, 1])]
)
def test_a_tensor_made_from_host_values_is_named_however_small(case: str, shape: list[int]) -> None:
    why = _replay(case)
    assert why is not None and "no recorded op made" in why and f"shape {shape}" in why


def test_a_forward_that_writes_a_parameter_is_refused() -> None:
    why = _replay("WritesParameter")
    assert why is not None and "changed the parameter 'w'" in why


def test_a_replay_that_runs_out_of_memory_says_so_instead_of_blaming_the_forward() -> None:
    why = _replay("OutOfMemoryInTheReplay")
    assert why is not None and why.startswith("ReplayOutOfMemory: OutOfMemoryError: CUDA out of memory"), why
    assert "harness did not see" not in why


def test_a_descriptor_of_a_triton_without_the_tf32_flag_is_read_and_rebuilt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Triton 3.6 (the H200 machine's) has no `round_f32_to_tf32` on its `TensorDescriptor`:
    reading one as 3.9 does raised AttributeError and failed an honest TMA kernel there."""
    import torch

    from kernelcraft.engine.replay import descriptors

    class Triton36Descriptor:  # the 3.6 constructor: no TF32 argument
        def __init__(self, base, shape, strides, block_shape, padding="zero") -> None:  # type: ignore[no-untyped-def]
            self.base, self.shape, self.strides, self.block_shape, self.padding = (
                base,
                shape,
                strides,
                block_shape,
                padding,
            )

    monkeypatch.setattr(descriptors, "descriptor_type", lambda: Triton36Descriptor)
    base = torch.zeros(8, 16)
    old = Triton36Descriptor(base, [8, 16], [16, 1], [4, 16])
    assert descriptors.rounds_to_tf32(old) is False
    d = descriptors.Desc(None, (8, 16), (16, 1), (4, 16), "zero", descriptors.rounds_to_tf32(old))
    again = descriptors.descriptor(base, d)
    assert isinstance(again, Triton36Descriptor) and again.shape == [8, 16] and again.block_shape == [4, 16]
