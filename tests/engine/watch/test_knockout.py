"""The knockout: a forward whose output survives with its Triton launches skipped is a decoy."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

_SCRIPT = textwrap.dedent(
    """
    import os
    os.environ["TRITON_INTERPRET"] = "1"
    import numpy as np
    import torch, triton, triton.language as tl
    from kernelcraft.engine.watch.knockout import run_knocked_out

    @triton.jit
    def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)

    def launch(x):
        y = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 64),)](x, y, x.numel(), BLOCK=64)
        return y

    class Real(torch.nn.Module):
        def forward(self, x):
            return launch(x)

    class Numpy(torch.nn.Module):
        def forward(self, x):
            launch(x)
            return torch.from_numpy(np.maximum(x.numpy(), 0))

    class NoDispatch(torch.nn.Module):
        def forward(self, x):
            launch(x)
            with torch._C._DisableTorchDispatch():
                return torch.relu(x)

    class Reads(torch.nn.Module):
        def forward(self, x):
            y = launch(x)
            return y * 1 if float(y.sum()) >= 0 else y

    @torch.library.custom_op("knock::relu", mutates_args=())
    def relu_op(x: torch.Tensor) -> torch.Tensor:
        return launch(x)  # its empty_like is poisoned like forward's own

    class Library(torch.nn.Module):
        def forward(self, x):
            return relu_op(x)

    x = torch.randn(300)
    ref = torch.relu(x)
    out, _, _ = run_knocked_out(Library(), [x])
    print("Library-poisoned", bool(out.isnan().all()))
    for model in (Real(), Numpy(), NoDispatch(), Reads(), Library()):
        out, skipped, err = run_knocked_out(model, [x])
        survived = out is not None and torch.allclose(out, ref, equal_nan=False)
        print(type(model).__name__, survived, skipped)
    """
)


@pytest.mark.slow
def test_only_outputs_computed_outside_the_kernels_survive_the_knockout(tmp_path):
    script = tmp_path / "knockout.py"
    script.write_text(_SCRIPT)
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = [line.split() for line in out.stdout.splitlines()]
    assert lines == [
        ["Library-poisoned", "True"],
        ["Real", "False", "1"],
        ["Numpy", "True", "1"],
        ["NoDispatch", "True", "1"],
        ["Reads", "False", "1"],
        ["Library", "False", "1"],
    ]
