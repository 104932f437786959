"""The cookbook's paths its own tasks do not take, checked where no GPU is: the one-pass kernels
(softmax, InstanceNorm, GroupNorm: programs of a row that wait on each other, GPU only), the rows
kernels of max pooling and depthwise convolution, the channels-last convolution, and the split
GEMMs (gemm, bmm, linear_epilogue) with TF32 parts as well as bfloat16 ones.

The evaluator test in test_cookbook.py runs each entry on its own task in the interpreter, which takes
the CPU paths. Here: the one-pass kernels run in the interpreter with one program a row (where no
program waits), agree with PyTorch, and compile for sm_90a to a release add and an acquire spin;
the host never picks them off the GPU; the rows kernels agree with PyTorch over strides, paddings,
dilations and window sizes, across several row blocks; the channels-last convolution agrees with
PyTorch with and without its epilogue.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from typing import Any

import pytest

from kernelcraft.knowledge.cookbook.book import ENTRIES

INTERPRETED = r"""
import importlib.util, json, torch
import torch.nn.functional as F
from kernelcraft.engine.watch.tf32 import emulate_tf32
emulate_tf32()  # bfloat16 dots as the GPU computes them (Triton's interpreter alone gets them wrong)

def entry(name):
    spec = importlib.util.spec_from_file_location(name, f"{ENTRIES}/{name}/kernel.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

out = {}
torch.manual_seed(0)
sm, inorm, gnorm, pool = entry("softmax"), entry("instancenorm"), entry("groupnorm"), entry("pool2d")
x = torch.randn(5, 3000) * 20
x[1, :9] = float("-inf")
for log in (False, True):
    y, part, count = torch.empty_like(x), torch.empty(5, 1, 2), torch.zeros(5, dtype=torch.int32)
    sm.softmax_one_pass_kernel[(5,)](x, y, part, count, 3000, 1, LOG=log, CHUNK=4096, BLOCK_P=1)
    ref = torch.log_softmax(x, 1) if log else torch.softmax(x, 1)
    finite = torch.isfinite(ref)
    out[f"softmax log={log}"] = [float(((y - ref).abs() / (1 + ref.abs()))[finite].max()), bool((y[~finite] == ref[~finite]).all()), count.tolist()]
t = torch.randn(2, 6, 9, 10) * 3 + 1
w, b = torch.randn(6), torch.randn(6)
y, part, count = torch.empty_like(t), torch.empty(12, 1, 2), torch.zeros(12, dtype=torch.int32)
inorm.plane_one_pass_kernel[(12,)](t, w, b, y, part, count, 90, 6, 1, 1e-5, HAS_AFFINE=True, CHUNK=128, BLOCK_P=1)
out["instancenorm"] = [float((y - F.instance_norm(t, weight=w, bias=b, eps=1e-5)).abs().max()), count.tolist()]
for one_channel, groups, chunk, spatial in ((False, 3, 256, (9, 10)), (True, 6, 64, (8, 8))):
    t = torch.randn(2, 6, *spatial) * 3 + 1
    S, CG = spatial[0] * spatial[1], 6 // groups
    segments = 2 * groups
    y, part, count = torch.empty_like(t), torch.empty(segments, 1, 2), torch.zeros(segments, dtype=torch.int32)
    gnorm.groupnorm_one_pass_kernel[(segments,)](
        t, w, b, y, part, count, CG * S, S, CG, groups, 1, 1e-5,
        HAS_AFFINE=True, ONE_CHANNEL=one_channel, CHUNK=chunk, BLOCK_P=1,
    )
    out[f"groupnorm one_channel={one_channel}"] = [float((y - F.group_norm(t, groups, w, b, 1e-5)).abs().max()), count.tolist()]
out["host picks on cpu"] = [sm._one_pass_chunk(x, 393216), inorm._one_pass_chunk(t, 262144), gnorm._one_pass_chunk(t, 2 ** 21)]
pool.ROWS = 3  # 3 or 4 row blocks of 3 rows: every block edge, at a third of the interpreter's time
img = torch.randn(1, 2, 11, 13)
errors = {}
for ks, st, pad, dil in ((4, 1, 1, 1), (3, 1, 1, 2), (2, 1, 0, 1), (1, 1, 0, 1), (3, (1, 2), 1, 1), ((2, 4), 1, (1, 2), 1)):
    for mode in ("max", "avg"):
        if mode == "avg" and dil != 1:
            continue
        got = pool.pool2d(img, ks, st, pad, dil, mode)
        ref = F.max_pool2d(img, ks, st, pad, dil) if mode == "max" else F.avg_pool2d(img, ks, st, pad)
        errors[f"{ks} {st} {pad} {dil} {mode}"] = float((got - ref).abs().max()) if got.shape == ref.shape else -1.0
out["pool"] = errors
conv, dw = entry("conv2d"), entry("depthwise_conv2d")
for kernel in (conv.conv2d_kernel, conv.conv2d_nhwc_kernel):
    kernel.configs = kernel.configs[:1]  # one config: the autotuner runs it without timing
errors = {}
for C, OC, ks, st, pad, dil, act, bias, post in (
    (16, 24, 3, 1, 0, 1, "none", False, False), (32, 40, 3, 1, 1, 1, "relu", True, True),
    (16, 8, (2, 3), (2, 1), (1, 2), (1, 2), "none", True, False), (48, 16, 1, 1, 0, 1, "relu", False, True),
):
    x = torch.randn(1, C, 8, 9)
    if C == 32:  # an input already channels-last: the parts are read through its strides
        x = x.contiguous(memory_format=torch.channels_last)
    w = torch.randn(OC, C, *((ks, ks) if isinstance(ks, int) else ks)) * 0.1
    b = torch.randn(OC) if bias else None
    pb = torch.randn(OC) if post else None
    got = conv.conv2d(x, w, b, st, pad, dil, activation=act, post_bias=pb)
    ref = F.conv2d(x, w, b, st, pad, dil)
    ref = ref.clamp_min(0) if act == "relu" else ref
    ref = ref + pb.view(1, -1, 1, 1) if post else ref
    errors[f"{C} {OC} {ks} {st} {pad} {dil} {act}"] = float((got - ref).abs().max()) if got.shape == ref.shape else -1.0
out["conv nhwc"] = errors
dw.ROWS = 3
errors = {}
x = torch.randn(1, 2, 11, 13)
for kh, kw, st, pad, dil, bias in (
    (3, 3, 1, 0, 1, False), (3, 3, 1, 1, 1, True), (1, 1, 1, 0, 1, True), (2, 3, 1, (1, 0), 1, False),
    (4, 2, (1, 2), 1, (1, 2), True),
):
    w = torch.randn(2, 1, kh, kw)
    b = torch.randn(2) if bias else None
    got = dw.depthwise_conv2d(x, w, b, st, pad, dil)
    ref = F.conv2d(x, w, b, st, pad, dil, groups=2)
    errors[f"{kh} {kw} {st} {pad} {dil} {bias}"] = float((got - ref).abs().max()) if got.shape == ref.shape else -1.0
out["depthwise rows"] = errors
gemm, bmm, lin = entry("gemm"), entry("bmm"), entry("linear_epilogue")
for kernel in (gemm.matmul_kernel, bmm.bmm_kernel, lin.linear_epilogue_kernel):
    kernel.configs = kernel.configs[:1]
errors = {}
for precision in ("bf16x3", "tf32x3"):
    a, b = torch.rand(70, 130), torch.rand(50, 130).T  # B read through its strides (N-major)
    ref = a.double() @ b.double()
    errors[f"gemm {precision}"] = float(((gemm.matmul(a, b, precision) - ref).abs() / (1e-4 + 1e-4 * ref.abs())).max())
    bmm.PRECISION = lin.PRECISION = precision
    a, b = torch.rand(2, 40, 70), torch.rand(2, 70, 30)
    ref = a.double() @ b.double()
    errors[f"bmm {precision}"] = float(((bmm.bmm(a, b) - ref).abs() / (1e-4 + 1e-4 * ref.abs())).max())
    x, w, bias = torch.rand(30, 70), torch.rand(50, 70), torch.rand(50)
    ref = torch.relu(x.double() @ w.double().T + bias.double())
    got = lin.linear_epilogue(x, w, bias, activation="relu")
    errors[f"linear {precision}"] = float(((got - ref).abs() / (1e-4 + 1e-4 * ref.abs())).max())
out["split gemms"] = errors
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def interpreted() -> dict[str, Any]:
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.run(
        [sys.executable, "-c", f"ENTRIES = {str(ENTRIES)!r}\n" + INTERPRETED],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_one_pass_kernels_agree_with_pytorch_where_a_row_is_one_program(
    interpreted: dict[str, Any],
) -> None:
    for log in (False, True):
        err, inf_matches, counts = interpreted[f"softmax log={log}"]
        assert err < 1e-5 and inf_matches and counts == [1] * 5, (log, err)
    err, counts = interpreted["instancenorm"]
    assert err < 1e-5 and counts == [1] * 12
    for one_channel in (False, True):
        err, counts = interpreted[f"groupnorm one_channel={one_channel}"]
        assert err < 1e-5 and counts == [1] * (12 if one_channel else 6), (one_channel, err)


def test_off_the_gpu_the_host_never_picks_a_kernel_whose_programs_wait(interpreted: dict[str, Any]) -> None:
    assert interpreted["host picks on cpu"] == [[0, 0], [0, 0], [0, 0]]


def test_the_rows_pooling_kernel_agrees_with_pytorch_across_row_blocks(interpreted: dict[str, Any]) -> None:
    errors = interpreted["pool"]
    assert len(errors) == 11
    assert {k: e for k, e in errors.items() if not 0 <= e < 1e-5} == {}


def test_the_channels_last_convolution_agrees_with_pytorch(interpreted: dict[str, Any]) -> None:
    # C a multiple of 16 takes the channels-last implicit GEMM (the entry's own task, C = 5, does not)
    errors = interpreted["conv nhwc"]
    assert len(errors) == 4
    assert {k: e for k, e in errors.items() if not 0 <= e < 1e-4} == {}


def test_the_split_gemms_agree_with_an_exact_product_in_both_precisions(interpreted: dict[str, Any]) -> None:
    errors = interpreted["split gemms"]  # max |out - exact| / (1e-4 + 1e-4 |exact|): verify's test
    assert set(errors) == {f"{e} {p}" for e in ("gemm", "bmm", "linear") for p in ("bf16x3", "tf32x3")}
    assert all(0 <= err < 0.2 for err in errors.values()), errors


def test_the_rows_depthwise_kernel_agrees_with_pytorch_across_row_blocks(interpreted: dict[str, Any]) -> None:
    errors = interpreted["depthwise rows"]
    assert len(errors) == 5
    assert {k: e for k, e in errors.items() if not 0 <= e < 1e-5} == {}


def _entry(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"cookbook_{name}", ENTRIES / name / "kernel.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _ptx(fn: Any, types: dict[str, str], constexprs: dict[str, Any], warps: int) -> str:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    signature = {n: "constexpr" if n in constexprs else types[n] for n in fn.arg_names}
    compiled = triton.compile(
        ASTSource(fn, signature, constexprs), target=GPUTarget("cuda", 90, 32), options={"num_warps": warps}
    )
    return str(compiled.asm["ptx"])


@pytest.mark.slow
def test_the_one_pass_kernels_compile_for_sm_90a_to_a_release_add_and_an_acquire_spin() -> None:
    if os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("compiling needs Triton imported without TRITON_INTERPRET")
    f, i = "*fp32", "i32"
    cases = [
        (
            _entry("softmax").softmax_one_pass_kernel,
            {"N": i, "P": i},
            {"LOG": True, "CHUNK": 16384, "BLOCK_P": 32},
        ),
        (
            _entry("instancenorm").plane_one_pass_kernel,
            {"S": i, "C": i, "P": i, "eps": "fp32", "w_ptr": f, "b_ptr": f},
            {"HAS_AFFINE": True, "CHUNK": 16384, "BLOCK_P": 16},
        ),
        (
            _entry("groupnorm").groupnorm_one_pass_kernel,
            {"L": i, "S": i, "CG": i, "G": i, "P": i, "eps": "fp32", "w_ptr": f, "b_ptr": f},
            {"HAS_AFFINE": True, "ONE_CHANNEL": True, "CHUNK": 16384, "BLOCK_P": 128},
        ),
    ]
    for fn, types, constexprs in cases:
        types |= {"x_ptr": f, "y_ptr": f, "part_ptr": f, "count_ptr": "*i32"}
        ptx = _ptx(fn, types, constexprs, warps=4)
        name = fn.fn.__name__
        assert re.search(r"red\.global\.gpu\.release\.add|atom\.global\.gpu\.release\.add", ptx), name
        spin = re.search(
            r"\$(L__BB\d+_\d+):.*?ld\.global\.gpu\.acquire\.b32.*?bra\s+\t?\$\1;", ptx, re.DOTALL
        )
        assert spin, f"{name}: no acquire load in a loop"
