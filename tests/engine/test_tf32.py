"""The interpreter computes fp32 `tl.dot` as a GPU would: TF32 unless the kernel asks for IEEE."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from kernelcraft.engine.watch.tf32 import is_tf32, to_tf32


def test_to_tf32_keeps_ten_mantissa_bits_and_leaves_inf_and_nan():
    x = np.array([1.0 + 2.0**-10, 1.0 + 2.0**-11, -3.0, np.inf, np.nan], dtype=np.float32)
    out = to_tf32(x)
    assert out[0] == np.float32(1.0 + 2.0**-10)  # the 10th mantissa bit survives
    assert out[1] == np.float32(1.0)  # the 11th does not
    assert out[2] == np.float32(-3.0)
    assert np.isinf(out[3]) and np.isnan(out[4])


def test_is_tf32_names_only_plain_tf32():
    class P:
        def __init__(self, name: str) -> None:
            self.name = name

    assert is_tf32(P("TF32")) and not is_tf32(P("TF32x3")) and not is_tf32(P("IEEE"))


_KERNEL = textwrap.dedent(
    """
    import os
    os.environ["TRITON_INTERPRET"] = "1"
    import torch, triton, triton.language as tl
    from kernelcraft.engine.watch.tf32 import emulate_tf32
    emulate_tf32()

    @triton.jit
    def dot(a_ptr, b_ptr, c_ptr, IEEE: tl.constexpr):
        o = tl.arange(0, 32)
        a = tl.load(a_ptr + o[:, None] * 32 + o[None, :])
        b = tl.load(b_ptr + o[:, None] * 32 + o[None, :])
        if IEEE:
            c = tl.dot(a, b, input_precision="ieee")
        else:
            c = tl.dot(a, b)
        tl.store(c_ptr + o[:, None] * 32 + o[None, :], c)

    torch.manual_seed(0)
    a, b = torch.randn(32, 32), torch.randn(32, 32)
    for ieee in (False, True):
        c = torch.empty(32, 32)
        dot[(1,)](a, b, c, IEEE=ieee)
        print(ieee, torch.allclose(c, a @ b, rtol=1e-5, atol=1e-5))
    """
)


@pytest.mark.slow
def test_an_interpreted_fp32_dot_is_tf32_unless_the_kernel_asks_for_ieee(tmp_path):
    script = tmp_path / "dot.py"
    script.write_text(_KERNEL)
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False", "True", "True"]
