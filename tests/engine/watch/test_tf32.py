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


def test_to_bf16_rounds_to_nearest_even_and_split_bf16_parts_sum_back():
    from kernelcraft.engine.watch.tf32 import split_bf16, to_bf16

    x = np.array([1.0 + 2.0**-8, 1.0 + 3 * 2.0**-9, 1.0 + 2.0**-9, -3.0, np.inf], dtype=np.float32)
    out = to_bf16(x)
    assert out[0] == np.float32(1.0 + 2.0**-7) or out[0] == np.float32(1.0)  # a tie: to even
    assert out[0] == np.float32(1.0)  # 1 + 2^-8 sits halfway; the even neighbour is 1.0
    assert out[1] == np.float32(1.0 + 2.0**-7)  # above halfway: up
    assert out[2] == np.float32(1.0)  # below halfway: down
    assert out[3] == np.float32(-3.0) and np.isinf(out[4])
    rng = np.random.default_rng(0)
    v = rng.standard_normal(1000).astype(np.float32)
    hi, lo = split_bf16(v, 2)
    assert np.all(to_bf16(hi) == hi) and np.all(to_bf16(lo) == lo)  # every part is a bfloat16
    assert np.max(np.abs(hi + lo - v) / np.abs(v)) < 2.0**-16  # two parts: 16 bits of mantissa
    three = split_bf16(v, 3)
    assert np.max(np.abs(three[0] + three[1] + three[2] - v) / np.abs(v)) < 2.0**-23


_BF16_KERNEL = textwrap.dedent(
    """
    import os
    os.environ["TRITON_INTERPRET"] = "1"
    import torch, triton, triton.language as tl
    from kernelcraft.engine.watch.tf32 import emulate_tf32
    emulate_tf32()

    @triton.jit
    def dot(a_ptr, b_ptr, c_ptr, PREC: tl.constexpr):
        o = tl.arange(0, 32)
        a = tl.load(a_ptr + o[:, None] * 32 + o[None, :])
        b = tl.load(b_ptr + o[:, None] * 32 + o[None, :])
        tl.store(c_ptr + o[:, None] * 32 + o[None, :], tl.dot(a, b, input_precision=PREC))

    torch.manual_seed(0)
    a, b = torch.randn(32, 32), torch.randn(32, 32)
    exact = a.double() @ b.double()
    c = torch.empty(32, 32)
    dot[(1,)](a.bfloat16(), b.bfloat16(), c, PREC="ieee")  # bfloat16 operands: products exact in fp32
    print("bf16", torch.allclose(c, a.bfloat16().float() @ b.bfloat16().float(), rtol=1e-5, atol=1e-5))
    def parts(x, n):
        out = []
        for _ in range(n):
            out.append(x.bfloat16().float()); x = x - out[-1]
        return out
    for prec, n, terms in (("bf16x3", 2, ((1, 0), (0, 1), (0, 0))),
                           ("bf16x6", 3, ((1, 1), (0, 2), (2, 0), (1, 0), (0, 1), (0, 0)))):
        dot[(1,)](a, b, c, PREC=prec)
        ap, bp = parts(a, n), parts(b, n)
        want = sum(ap[i].double() @ bp[j].double() for i, j in terms)
        err, ieee_err = (c.double() - exact).abs().max().item(), (a @ b - exact).abs().max().item()
        # two parts hold 16 mantissa bits (worse than fp32), three hold 24 (about fp32)
        print(prec, torch.allclose(c.double(), want, rtol=1e-5, atol=1e-5), err > ieee_err if n == 2 else err < 1e-4)
    """
)


@pytest.mark.slow
def test_interpreted_bf16_dots_are_right_and_bf16x3_splits_fp32_operands_as_the_gpu_does(tmp_path):
    script = tmp_path / "dot_bf16.py"
    script.write_text(_BF16_KERNEL)
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["bf16", "True", "bf16x3", "True", "True", "bf16x6", "True", "True"]


def test_the_guard_holds_the_bf16_emulations_terms_by_value() -> None:
    from kernelcraft.engine.watch import guard, tf32

    assert isinstance(tf32._BF16_TERMS, tuple)  # no part of it can be changed in place
    watched = guard._watched()
    assert "kernelcraft.engine.watch.tf32._BF16_TERMS" in watched  # and rebinding it is seen
    assert "kernelcraft.engine.watch.tf32.split_bf16" in watched
