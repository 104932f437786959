"""libdevice computes in Triton's interpreter as on the GPU (`engine/watch/libdevice.py`)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from kernelcraft.engine.watch.libdevice import function_for


def test_each_cuda_symbol_names_the_function_it_computes() -> None:
    x = np.array([-2.5, -0.5, 0.5, 1.5, 2.5])
    assert np.allclose(function_for("__nv_tanhf")(x), np.tanh(x))
    assert np.allclose(function_for("__nv_erff")(x), [math.erf(v) for v in x])
    assert np.allclose(function_for("__nv_fast_expf")(x), np.exp(x))
    assert np.array_equal(function_for("__nv_rintf")(x), [-2.0, -0.0, 0.0, 2.0, 2.0])  # ties to even
    assert np.array_equal(function_for("__nv_roundf")(x), [-3.0, -1.0, 1.0, 2.0, 3.0])  # away from 0
    assert np.allclose(function_for("__nv_erfinvf")(function_for("__nv_erff")(x)), x)
    assert np.allclose(function_for("__nv_powf")(x, 2.0), x**2)
    assert function_for("__nv_no_such_thing") is None


_KERNEL = textwrap.dedent(
    """
    import os
    os.environ["TRITON_INTERPRET"] = "1"
    import torch, triton, triton.language as tl
    from triton.language.extra import libdevice
    from triton.language.extra.cuda import libdevice as cuda_libdevice
    from kernelcraft.engine.watch.tf32 import emulate_tf32
    emulate_tf32()

    @triton.jit
    def k(x_ptr, o_ptr):
        o = tl.arange(0, 64)
        x = tl.load(x_ptr + o)
        tl.store(o_ptr + o, libdevice.tanh(x) + cuda_libdevice.erf(x) + libdevice.pow(x, 2.0))

    x = torch.randn(64)
    out = torch.empty(64)
    k[(1,)](x, out)
    print(torch.allclose(out, torch.tanh(x) + torch.erf(x) + x * x, rtol=1e-6, atol=1e-6))
    print(libdevice.tanh.__module__)  # the stub again once the launch is over
    """
)


@pytest.mark.slow
def test_an_interpreted_kernel_calling_libdevice_computes_as_on_the_gpu(tmp_path) -> None:
    """Triton's interpreter ran no libdevice call ("cannot convert None to tensor"): an honest
    kernel using `libdevice.tanh` could not be verified on the CPU."""
    script = tmp_path / "libdevice.py"
    script.write_text(_KERNEL)
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "triton.language.extra.libdevice"]
